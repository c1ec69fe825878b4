"""The coding-agent activity: ask the configured agent for a fix.

Budgets stay separate. Failures of the service behind an agent (HTTP 429,
5xx, timeouts) are transient errors the runtime retries with backoff,
honouring ``retry-after``: transport retries. An agent that runs but gives
nothing usable (crashes, times out, answers without a diff that applies) is
retried while the repository's ``tool_retries`` allow, and then reported
as the outcome ``agent-failed``: tool retries. Whether to ask again with
feedback is the workflow's decision: repair attempts.

The built-in agent (``backend: http``) checkpoints each step through this
activity's heartbeat details (:mod:`app.agent.journal`), so a retried
attempt resumes its loop where the last one recorded it; a loop that stops
at a budget cap or on unusable model answers is reported at once (resuming
would stop the same way), with what it spent.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import TypeVar

from activities._support import (
    read_evidence,
)
from activities.repo_commands import run_step
from activities.workspace import Checkouts, PatchRejectedError, open_workspace, read_patch
from app.agent import (
    AgentFailed,
    AgentHttp,
    AgentPolicy,
    AgentProposal,
    AgentRequest,
    BudgetExhausted,
    Feedback,
    LoopHost,
    LoopStopped,
    build_agent,
)
from app.agent.base import REFUSED_WORKSPACES, ProposalRefused
from app.agent.budget import Caps, Usage, price_of
from app.agent.proxy import ModelProxy
from app.contracts import agent
from app.contracts.agent import FeedbackInput, ProposeInput, ProposeResult
from app.contracts.repo_commands import StepInput
from app.engine import (
    ActivityContext,
    PermanentError,
    StaleLease,
    TransientError,
    implements,
)
from app.evidence import EvidenceRef, EvidenceStore
from app.secrets import KnownSecrets
from app.workspace import NestedGitRefused, PatchRejected, Workspace, apply_patch, snapshot

T = TypeVar("T", int, float)
log = logging.getLogger("repairbot.activities")

#: Feedback evidence (a failing test log) is quoted up to this many bytes, from its end.
FEEDBACK_EVIDENCE_BYTES = 8_000


def model_cost(policy: AgentPolicy, backend: str, input_tokens: int, output_tokens: int) -> float:
    """USD for the tokens a CLI agent reported, priced by the operator's
    ``REPAIRBOT_AGENT_PRICES`` for the model named in ``backend``
    (``http:<provider>/<model>``, or a CLI agent's own name); 0 when unpriced."""
    price = price_of(policy.prices, backend.rsplit("/", 1)[-1]) or price_of(policy.prices, backend)
    return price.cost(input_tokens, output_tokens) if price is not None else 0.0


#: Counts earlier attempts carry (``ActivityContext.carry``).
_ENDED = "attempts_ended"
_TOOL_FAILURES = "tool_failures"


def _attempts(actx: ActivityContext) -> tuple[int, int]:
    """Tool retries spent before this attempt, and earlier attempts cut short
    by their worker dying (every earlier attempt that did not record its end)."""
    tool = int(actx.carried.get(_TOOL_FAILURES, 0))
    ended = int(actx.carried.get(_ENDED, 0))
    return tool, max(0, actx.attempt - 1 - ended)


@dataclass(frozen=True)
class AgentTools:
    """What the agent activity is given: the checkout tools, the operator's
    agent policy, the agents' own HTTP client, the model proxy the operator's
    command agent reaches its model through, and the secrets this worker holds."""

    checkouts: Checkouts
    policy: AgentPolicy = field(default_factory=AgentPolicy)
    http: AgentHttp | None = None
    proxy: ModelProxy | None = None
    secrets: KnownSecrets | None = None

    def known_secrets(self) -> KnownSecrets:
        """Every secret this worker holds (its settings', installation tokens
        minted so far) plus the agent policy's keys and command environment."""
        worker = self.secrets
        return KnownSecrets([*(worker.values() if worker else ()), *self.policy.secrets])


async def _propose_fix(
    actx: ActivityContext, tools: AgentTools, request: ProposeInput
) -> ProposeResult:
    store = tools.checkouts.evidence
    # The base first, without the candidate: setup runs there and the
    # snapshot after it is what the proposal is diffed from, so a refined
    # candidate is proposed whole, and setup's by-products never are.
    base = request.workspace.model_copy(update={"patch": None})
    async with open_workspace(actx, tools.checkouts, base) as ws:
        baseline = await _prepare(actx, tools.checkouts, ws, request)
        agent_http = tools.http
        policy = _within(tools.policy, request.run_caps)
        agent = build_agent(
            request.agent,
            policy=policy,
            # Only the operator's own command agent uses it (see build_agent).
            model_access=policy.model_access(tools.proxy) if request.agent is None else None,
            http_client=agent_http.client if agent_http else None,
            time_limit=request.time_limit_seconds,
            sandbox=tools.checkouts.sandbox,
            heartbeat=actx.heartbeat,
            host=_loop_host(actx, store, tools.known_secrets()),
            earlier_usage=request.run_usage,
        )
        agent_request = AgentRequest(
            workspace=ws,
            issue_title=request.issue_title,
            issue_body=request.issue_body,
            reproduction=[command.display() for command in request.reproduction],
            reproduction_output=_text(store, request.reproduction_log),
            feedback=[_feedback(store, item) for item in request.feedback],
            attempt=request.attempt,
            baseline=baseline,
            reproduction_commands=list(request.reproduction),
            test_command=request.test,
        )
        try:
            try:
                proposal = await tools.checkouts.keep_alive(
                    actx, agent.propose(agent_request), doing="asking the agent"
                )
            except REFUSED_WORKSPACES as exc:
                # The built-in loop records its workspace after every tool call.
                raise ProposalRefused(f"the proposal was refused: {exc}") from None
        except AgentFailed as failure:
            return await _failed(actx, tools, request, failure)
    return _proposed(actx, tools, request, proposal)


def _within(policy: AgentPolicy, caps: Caps | None) -> AgentPolicy:
    """The operator's policy with its run caps lowered to the repository's."""
    if caps is None:
        return policy
    run = policy.budget.run

    def lower(ours: T | None, theirs: T | None) -> T | None:
        return theirs if ours is None else ours if theirs is None else min(ours, theirs)

    tighter = run.model_copy(
        update={
            "tokens": lower(run.tokens, caps.tokens),
            "cost_usd": lower(run.cost_usd, caps.cost_usd),
        }
    )
    return replace(policy, budget=policy.budget.model_copy(update={"run": tighter}))


def _loop_host(actx: ActivityContext, store: EvidenceStore, secrets: KnownSecrets) -> LoopHost:
    return LoopHost(
        store=store,
        save=actx.checkpoint,
        beat=actx.heartbeat,
        previous=actx.last_checkpoint,
        fault=actx.fault,
        secrets=secrets,
    )


async def _prepare(
    actx: ActivityContext, checkouts: Checkouts, ws: Workspace, request: ProposeInput
) -> str:
    """Run setup, take the baseline snapshot, apply the candidate; the baseline."""
    if request.setup:
        setup = await run_step(
            actx,
            checkouts,
            ws,
            StepInput(
                workspace=request.workspace,
                commands=request.setup,
                setup_network=request.setup_network,
                time_limit_seconds=request.time_limit_seconds,
            ),
            kind="setup",
            name=f"agent-setup-attempt-{request.attempt}.log",
        )
        if setup.status != "passed":
            # It passed when the bug was reproduced: most likely a flaky download.
            raise TransientError(f"setup failed before the agent ran (log {setup.log.sha256})")
    try:
        baseline = await snapshot(ws)
    except NestedGitRefused as exc:
        # Setup (repository code) left a .git below the root: the worker's
        # git would follow it. Running setup again would leave it again.
        raise PermanentError(f"setup left the work tree unusable: {exc}") from None
    candidate = read_patch(checkouts.evidence, request.workspace.patch)
    if candidate:
        try:
            await apply_patch(ws, candidate, index=True)
        except PatchRejected as exc:
            raise PatchRejectedError(f"the candidate patch does not apply: {exc}") from None
    return baseline


async def _failed(
    actx: ActivityContext, tools: AgentTools, request: ProposeInput, failure: AgentFailed
) -> ProposeResult:
    """Retry while tool retries remain (raises), else report the failure.

    Counted by the attempts that ended with a tool failure (carried across
    attempts), not by activity attempt: a worker that died while the agent
    ran (recovery test 1) resumes without spending one.
    """
    transcript = tools.checkouts.evidence.put(
        tools.known_secrets().redact_bytes(failure.transcript),
        kind="agent-transcript",
        name=f"agent-attempt-{request.attempt}-try-{actx.attempt}.log",
    )
    spent, interrupted = _attempts(actx)
    if failure.retryable and spent < request.tool_retries:
        await actx.carry(_TOOL_FAILURES, spent + 1)
        raise TransientError(f"{failure.message} (transcript {transcript.sha256}); trying again")
    usage = failure.usage if isinstance(failure, LoopStopped) else Usage()
    return ProposeResult(
        outcome="budget-exhausted" if isinstance(failure, BudgetExhausted) else "agent-failed",
        transcript=transcript,
        error=failure.message,
        tool_attempt=actx.attempt,
        tool_retries=spent,
        interrupted=interrupted,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        turns=usage.turns,
        tool_calls=usage.tool_calls,
        cost_usd=usage.cost_usd,
    )


def _proposed(
    actx: ActivityContext, tools: AgentTools, request: ProposeInput, proposal: AgentProposal
) -> ProposeResult:
    store = tools.checkouts.evidence
    secrets = tools.known_secrets()
    transcript = store.put(
        secrets.redact_bytes(proposal.transcript),
        kind="agent-transcript",
        name=f"agent-attempt-{request.attempt}.log",
    )
    if secrets.found_in(proposal.patch):
        # Not redacted and proposed: a patch with a hole in it is not the
        # change that would be verified, and the agent had no business
        # holding a secret. The run ends; nothing is stored or pushed.
        raise PermanentError(
            f"the agent's proposal (attempt {request.attempt}) contains a secret this "
            f"installation holds (an API key, token or key material); it was refused and "
            f"nothing was pushed (transcript {transcript.sha256}, redacted)"
        )
    patch = None
    if proposal.patch:
        patch = store.put(
            proposal.patch.encode(errors="surrogateescape"),
            kind="patch",
            name=f"candidate-attempt-{request.attempt}.patch",
        )
    log.info(
        "agent %s changed %d file(s) for run %s (repair attempt %s)",
        proposal.backend,
        len(proposal.files_changed),
        actx.run_id,
        request.attempt,
    )
    return ProposeResult(
        outcome="proposed" if patch is not None else "no-change",
        patch=patch,
        files_changed=[secrets.redact(path) for path in proposal.files_changed],
        summary=secrets.redact(proposal.summary),
        input_tokens=proposal.input_tokens,
        output_tokens=proposal.output_tokens,
        backend=proposal.backend,
        transcript=transcript,
        tool_attempt=actx.attempt,
        tool_retries=_attempts(actx)[0],
        interrupted=_attempts(actx)[1],
        turns=proposal.turns,
        tool_calls=proposal.tool_calls,
        # The built-in loop prices its own tokens; for other agents, the
        # operator's model price table does.
        cost_usd=proposal.cost_usd
        or model_cost(
            tools.policy,
            proposal.backend,
            proposal.input_tokens,
            proposal.output_tokens,
        ),
    )


def _text(store: EvidenceStore, ref: EvidenceRef | None, limit: int | None = None) -> str:
    if ref is None:
        return ""
    data = read_evidence(store, ref)
    if limit is not None and len(data) > limit:
        data = b"[... earlier output omitted ...]\n" + data[-limit:]
    return data.decode(errors="replace")


def _feedback(store: EvidenceStore, item: FeedbackInput) -> Feedback:
    text = item.text
    if item.evidence is not None:
        quoted = _text(store, item.evidence, FEEDBACK_EVIDENCE_BYTES)
        text = f"{text}\n\nLog ({item.evidence.name}):\n\n{quoted}"
    return Feedback(kind=item.kind, text=text)


class AgentActivities:
    def __init__(self, tools: AgentTools) -> None:
        self.tools = tools

    @implements(agent.propose_fix)
    async def propose_fix(self, actx: ActivityContext, request: ProposeInput) -> ProposeResult:
        try:
            return await _propose_fix(actx, self.tools, request)
        except StaleLease:
            raise  # this attempt is no longer ours: nothing may be recorded
        except Exception:
            # An attempt that ends on purpose says so; one whose worker died cannot.
            with contextlib.suppress(Exception):
                await actx.carry(_ENDED, int(actx.carried.get(_ENDED, 0)) + 1)
            raise
