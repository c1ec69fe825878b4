"""The command back end: any CLI agent, run in the workspace like a repository command.

The agent gets its inputs as files in the workspace's scratch directory
(outside the repository tree, so they never end up in the proposal) and
their paths in the environment:

========================== =====================================================
``REPAIRBOT_ISSUE_FILE``   Markdown: the issue title and body
``REPAIRBOT_REPRO_OUTPUT_FILE`` the reproduction's failing output
``REPAIRBOT_FEEDBACK_FILE`` Markdown: feedback on earlier attempts (may be empty)
``REPAIRBOT_REQUEST_FILE`` all of the above as JSON, plus the reproduction commands
``REPAIRBOT_RESULT_FILE``  where the agent may write JSON ``{"summary": str,
                           "input_tokens": int, "output_tokens": int}``
``REPAIRBOT_ATTEMPT``      the repair attempt number (1, 2, ...)
``REPAIRBOT_BASE_SHA``     the base commit
========================== =====================================================

Issue text and logs are never interpolated into a command line or a shell
string: they are data in files. The command runs in the same sandbox, with
the same scrubbed environment, limits and heartbeats, as any repository
command (:mod:`app.sandbox.runner`): it sees the workspace and nothing of the
worker, and reaches the network only when the operator allows agents to
(``REPAIRBOT_AGENT_NETWORK``). API keys a CLI agent needs are passed
explicitly by the operator (``extra_env``), never inherited.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.agent.base import (
    Agent,
    AgentFailed,
    AgentProposal,
    AgentRequest,
    ProposalRefused,
    proposal_diff,
)
from app.agent.prompt import feedback_for_model
from app.agent.proxy import ModelProxy, Upstream
from app.agent.untrusted import DATA_NOTICE, issue_for_model, strip_invisible, visible_text
from app.checkout import read_untrusted
from app.repo_config import Command
from app.sandbox.runner import Heartbeat, Sandbox, run_command

log = logging.getLogger("repairbot.agent")

#: Largest result file read (a summary and two numbers).
MAX_RESULT_BYTES = 64 * 1024


class CommandAgent(Agent):
    def __init__(
        self,
        command: Command,
        *,
        time_limit: float,
        sandbox: Sandbox | None = None,
        extra_env: Mapping[str, str] | None = None,
        heartbeat: Heartbeat | None = None,
        network: bool = False,
        model_access: ModelAccess | None = None,
    ) -> None:
        self.command = command
        self.model_access = model_access
        self.network = network
        self.time_limit = time_limit
        self.sandbox = sandbox
        self.extra_env = dict(extra_env or {})
        self.heartbeat = heartbeat

    @property
    def name(self) -> str:
        program = self.command.to_argv()[0] if self.command.argv else "sh"
        return f"command:{Path(program).name}"

    async def propose(self, request: AgentRequest) -> AgentProposal:
        if self.model_access is None:
            return await self._propose(request, {}, {})
        access = self.model_access
        # The token lives exactly as long as this attempt's command.
        async with access.proxy.attempt(access.upstream) as token:
            return await self._propose(request, access.env(token), proxy_forwards(access))

    async def _propose(
        self, request: AgentRequest, model_env: Mapping[str, str], forwards: dict[str, Any]
    ) -> AgentProposal:
        ws = request.workspace
        env = {**self.extra_env, **model_env, **write_inputs(request)}
        run = await run_command(
            self.command,
            cwd=ws.repo,
            home=ws.home,
            tmpdir=ws.tmp,
            time_limit=self.time_limit,
            extra_env=env,
            sandbox=self.sandbox,
            heartbeat=self.heartbeat,
            # Its inputs and its result file live there, outside the tree.
            writable=[ws.scratch],
            network=self.network,
            **forwards,
        )
        if run.result.quota_exceeded is not None:
            # Stopped at the limit: what it left is refused, and another try
            # would fill the disk again.
            raise ProposalRefused(
                f"the agent was stopped: {run.result.quota_exceeded}", transcript=run.output
            )
        if run.result.timed_out:
            raise AgentFailed(
                f"the agent did not finish within {self.time_limit:g}s", transcript=run.output
            )
        if run.result.exit_code != 0:
            raise AgentFailed(
                f"the agent exited with status {run.result.exit_code}", transcript=run.output
            )
        report = await _read_report(Path(env["REPAIRBOT_RESULT_FILE"]))
        quota = (self.sandbox or Sandbox()).limits.quota_bytes
        patch, changed = await proposal_diff(
            ws, request.diff_base, transcript=run.output, quota_bytes=quota
        )
        return AgentProposal(
            patch=patch,
            summary=str(report.get("summary") or "").strip(),
            files_changed=changed,
            input_tokens=_count(report.get("input_tokens")),
            output_tokens=_count(report.get("output_tokens")),
            backend=self.name,
            transcript=run.output,
        )


@dataclass(frozen=True)
class ModelAccess:
    """How the operator's command agent reaches its model: through the proxy.

    The agent gets the proxy's address and a per-attempt token in the
    variables its SDK reads (``OPENAI_BASE_URL``/``OPENAI_API_KEY`` or the
    ``ANTHROPIC_`` pair, plus ``REPAIRBOT_MODEL_BASE_URL``/``_TOKEN``); the
    real key stays in the worker (:mod:`app.agent.proxy`).
    """

    proxy: ModelProxy
    upstream: Upstream
    #: The proxy as the sandbox reaches it (its socket forwarded to this address).
    address: str

    def env(self, token: str) -> dict[str, str]:
        prefix = self.upstream.provider.upper()
        return {
            "REPAIRBOT_MODEL_BASE_URL": self.address,
            "REPAIRBOT_MODEL_TOKEN": token,
            f"{prefix}_BASE_URL": self.address,
            f"{prefix}_API_KEY": token,
        }


def proxy_forwards(access: ModelAccess) -> dict[str, Any]:
    """``run_command`` arguments that make the model proxy's unix socket
    ``access.address`` inside the sandbox: the sandbox's port forward
    (:class:`app.sandbox.forward.PortForward`, built on branch sandbox-net).
    Empty where this build's sandbox has no forward, and then the agent has
    no route to its model (it holds only a token either way)."""
    try:
        forward = importlib.import_module("app.sandbox.forward")
    except ImportError:
        return {}
    port = httpx.URL(access.address).port or 80
    return {"forwards": [forward.PortForward(socket=access.proxy.socket_path, port=port)]}


def write_inputs(request: AgentRequest) -> dict[str, str]:
    """Write the request into the scratch directory; return the environment naming it."""
    scratch = request.workspace.scratch
    scratch.mkdir(parents=True, exist_ok=True)
    issue = scratch / "issue.md"
    # What readers of the issue see, framed as data: hidden parts (HTML
    # comments...) never reach the agent (app/agent/untrusted.py).
    issue.write_text(issue_for_model(request.issue_title, request.issue_body) + "\n")
    repro = scratch / "reproduction-output.txt"
    repro.write_text(request.reproduction_output)
    feedback = scratch / "feedback.md"
    feedback.write_text(
        "\n\n".join(f"## {item.kind}\n\n{feedback_for_model(item)}" for item in request.feedback)
    )
    result = scratch / "result.json"
    result.unlink(missing_ok=True)
    payload = {
        "attempt": request.attempt,
        "base_sha": request.workspace.base_sha,
        "issue": {
            "title": strip_invisible(request.issue_title).strip(),
            "body": visible_text(request.issue_body),
            "notice": DATA_NOTICE,
        },
        "reproduction": {"commands": request.reproduction, "output_file": str(repro)},
        "feedback": [
            {"kind": item.kind, "text": feedback_for_model(item)} for item in request.feedback
        ],
    }
    req = scratch / "request.json"
    req.write_text(json.dumps(payload, indent=2))
    return {
        "REPAIRBOT_ISSUE_FILE": str(issue),
        "REPAIRBOT_REPRO_OUTPUT_FILE": str(repro),
        "REPAIRBOT_FEEDBACK_FILE": str(feedback),
        "REPAIRBOT_REQUEST_FILE": str(req),
        "REPAIRBOT_RESULT_FILE": str(result),
        "REPAIRBOT_ATTEMPT": str(request.attempt),
        "REPAIRBOT_BASE_SHA": request.workspace.base_sha,
    }


async def _read_report(path: Path) -> dict[str, Any]:
    # Optional: an agent that writes nothing still proposes its diff. The
    # agent chose what sits at this path (a FIFO, a link to /dev/zero, a
    # huge file): read it like every file the sandbox touched.
    try:
        data = json.loads(await read_untrusted(path, limit=MAX_RESULT_BYTES))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("agent result file %s is unreadable: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
