"""propose_fix with real agents; its proposals verified by verify_candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.agent import AgentPolicy
from app.contracts.agent import propose_fix
from app.contracts.repo_commands import verify_candidate
from app.contracts.workspace import WorkspaceSpec
from app.engine._errors import PermanentError, TransientError
from app.evidence import EvidenceRef, EvidenceStore
from app.repo_config import AgentConfig, Command
from app.secrets import KnownSecrets
from tests.activities.support import (
    FIX_AGENT,
    REPRO,
    TESTS,
    Dependencies,
    RecordingContext,
    call,
    with_patch,
)
from tests.agent.sample_repo import FIX_ARGV, FIX_DIFF


def propose_input(spec: WorkspaceSpec, **extra: Any) -> dict[str, Any]:
    return {
        "workspace": spec.model_dump(mode="json"),
        "agent": FIX_AGENT,
        "issue_title": "add() subtracts",
        "issue_body": "add(2, 3) returns -1",
        "reproduction": [REPRO.model_dump(mode="json")],
        "time_limit_seconds": 30,
        **extra,
    }


async def verify(
    actx: RecordingContext, spec: WorkspaceSpec, patch: dict[str, Any]
) -> dict[str, Any]:
    payload = {
        "workspace": with_patch(spec, EvidenceRef.model_validate(patch)),
        "reproduction": [REPRO.model_dump(mode="json")],
        "test": TESTS.model_dump(mode="json"),
        "time_limit_seconds": 30,
    }
    result: dict[str, Any] = await call(verify_candidate, actx, payload)
    return result


async def test_the_command_agents_proposal_verifies(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    log = evidence.put(b"AssertionError: -1\n", kind="reproduce-log", name="repro.log")
    result = await call(propose_fix, actx, propose_input(spec, reproduction_log=log.model_dump()))
    assert result["outcome"] == "proposed" and result["files_changed"] == ["calc.py"]
    assert result["patch"]["kind"] == "patch" and result["tool_attempt"] == 1
    assert b"+    return a + b" in evidence.get(result["patch"]["sha256"])
    assert b"attempt 1: add() subtracts" in evidence.get(result["transcript"]["sha256"])
    assert (await verify(actx, spec, result["patch"]))["verdict"] == "verified"


async def test_setup_by_products_are_not_proposed(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    setup = [{"shell": "mkdir -p build && echo compiled > build/out.txt"}]
    result = await call(propose_fix, actx, propose_input(spec, setup=setup))
    patch = evidence.get(result["patch"]["sha256"]).decode()
    assert result["files_changed"] == ["calc.py"] and "build/out.txt" not in patch


async def test_verification_feedback_drives_the_next_attempt(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    agent = {"backend": "command", "command": {"argv": [*FIX_ARGV, "--wrong-first", "a * b"]}}
    first = await call(propose_fix, actx, propose_input(spec, agent=agent))
    verdict = await verify(actx, spec, first["patch"])
    assert verdict["verdict"] == "still-reproduces"
    feedback = [
        {
            "kind": "verification",
            "text": verdict["reason"],
            "evidence": verdict["reproduction"]["log"],
        }
    ]
    second = await call(
        propose_fix, actx, propose_input(spec, agent=agent, attempt=2, feedback=feedback)
    )
    assert second["summary"].endswith("Took the feedback on the previous attempt into account.")
    assert (await verify(actx, spec, second["patch"]))["verdict"] == "verified"


async def test_refining_a_candidate_proposes_the_whole_change_from_the_base(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    previous = evidence.put(FIX_DIFF.encode(), kind="patch", name="candidate-1.patch")
    agent = {"backend": "command", "command": {"shell": "echo '# reviewed' >> calc.py"}}
    result = await call(
        propose_fix, actx, propose_input(spec.model_copy(update={"patch": previous}), agent=agent)
    )
    patch = evidence.get(result["patch"]["sha256"]).decode()
    assert "+    return a + b" in patch and "+# reviewed" in patch


async def test_tool_failures_spend_tool_retries_then_report(
    deps: Dependencies, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    failing = {"backend": "command", "command": {"shell": "echo confused; exit 3"}}
    payload = propose_input(spec, agent=failing, tool_retries=1)
    first = RecordingContext(deps, attempt=1)
    with pytest.raises(TransientError, match=r"exited with status 3.*trying again"):
        await call(propose_fix, first, payload)
    result = await call(
        propose_fix, RecordingContext(deps, attempt=2, carried=first.carried), payload
    )
    assert result["outcome"] == "agent-failed" and result["tool_attempt"] == 2
    assert (result["tool_retries"], result["interrupted"]) == (1, 0)
    assert result["error"] == "the agent exited with status 3" and result["patch"] is None
    assert evidence.get(result["transcript"]["sha256"]).startswith(b"confused")


async def test_a_worker_crash_is_not_a_tool_retry(deps: Dependencies, spec: WorkspaceSpec) -> None:
    """Attempt 1's worker died (it recorded nothing): attempt 2 still has the
    tool retry, and the result says one attempt was interrupted."""
    failing = {"backend": "command", "command": {"shell": "echo confused; exit 3"}}
    payload = propose_input(spec, agent=failing, tool_retries=1)
    second = RecordingContext(deps, attempt=2)
    with pytest.raises(TransientError, match="trying again"):
        await call(propose_fix, second, payload)
    third = RecordingContext(deps, attempt=3, carried=second.carried)
    result = await call(propose_fix, third, payload)
    assert result["outcome"] == "agent-failed"
    assert (result["tool_retries"], result["interrupted"]) == (1, 1)


async def test_an_agent_that_changes_nothing(actx: RecordingContext, spec: WorkspaceSpec) -> None:
    result = await call(
        propose_fix, actx, propose_input(spec, agent={"backend": "command", "command": "true"})
    )
    assert result["outcome"] == "no-change" and result["patch"] is None


async def test_failing_setup_is_retried_not_proposed(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    with pytest.raises(TransientError, match="setup failed"):
        await call(propose_fix, actx, propose_input(spec, setup=[{"shell": "exit 1"}]))


# -- no secret leaves through what the agent produced (issue 19, item 2) -------------

OPERATOR_KEY = "sk-operator-cli-key-0123456789abcdef"


def operator_policy(**kwargs: Any) -> AgentPolicy:
    return AgentPolicy(command_env={"CLI_AGENT_API_KEY": OPERATOR_KEY}, **kwargs)


async def test_a_repository_command_is_refused_unless_the_operator_allows_it(
    deps: Dependencies, spec: WorkspaceSpec
) -> None:
    deps.add(operator_policy())
    leaker = {"backend": "command", "command": {"shell": "env > leaked-env.txt"}}
    with pytest.raises(PermanentError, match="runs only its own agent command"):
        await call(propose_fix, RecordingContext(deps), propose_input(spec, agent=leaker))


async def test_an_allowed_repository_command_never_sees_the_operators_env(
    deps: Dependencies, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    deps.add(operator_policy(repository_commands=True))
    leaker = {"backend": "command", "command": {"shell": "env > leaked-env.txt; env"}}
    result = await call(propose_fix, RecordingContext(deps), propose_input(spec, agent=leaker))
    assert result["outcome"] == "proposed"
    patch = evidence.get(result["patch"]["sha256"])
    assert b"leaked-env.txt" in patch and b"CLI_AGENT_API_KEY" not in patch


async def test_a_proposal_holding_a_secret_is_refused_and_nothing_is_stored(
    deps: Dependencies,
    spec: WorkspaceSpec,
    evidence: EvidenceStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored: list[bytes] = []
    put = evidence.put

    def recording_put(data: bytes, *, kind: str, name: str) -> EvidenceRef:
        stored.append(data)
        return put(data, kind=kind, name=name)

    monkeypatch.setattr(evidence, "put", recording_put)
    # However the agent came by it (here: the operator's agent, which holds it).
    deps.add(operator_policy(default=_command('echo "$CLI_AGENT_API_KEY" > key.txt')))
    with pytest.raises(PermanentError, match="contains a secret") as caught:
        await call(propose_fix, RecordingContext(deps), propose_input(spec, agent=None))
    assert OPERATOR_KEY not in str(caught.value)
    assert stored and not [data for data in stored if OPERATOR_KEY.encode() in data]


async def test_summaries_and_transcripts_are_redacted(
    deps: Dependencies, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    webhook_secret = "whsec-0123456789-webhook"
    deps.add(KnownSecrets([webhook_secret]))
    agent = (
        "echo '# fixed' >> calc.py; "
        'echo "my key is $CLI_AGENT_API_KEY and ' + webhook_secret + '"; '
        'printf \'{"summary": "used %s and ' + webhook_secret + '"}\' "$CLI_AGENT_API_KEY" '
        '> "$REPAIRBOT_RESULT_FILE"'
    )
    deps.add(operator_policy(default=_command(agent)))
    result = await call(propose_fix, RecordingContext(deps), propose_input(spec, agent=None))
    assert result["outcome"] == "proposed"
    transcript = evidence.get(result["transcript"]["sha256"])
    assert b"my key is [redacted] and [redacted]" in transcript
    assert result["summary"] == "used [redacted] and [redacted]"


def _command(shell: str) -> AgentConfig:
    return AgentConfig(backend="command", command=Command(shell=shell))


async def test_setup_that_plants_a_gitfile_ends_the_run_with_a_reason(
    actx: RecordingContext, spec: WorkspaceSpec, tmp_path: Path
) -> None:
    other = tmp_path / "someone-elses-repo"
    setup = [{"shell": f"mkdir -p vendor && echo 'gitdir: {other}/.git' > vendor/.git"}]
    with pytest.raises(PermanentError, match=r"setup left the work tree unusable: vendor/\.git"):
        await call(propose_fix, actx, propose_input(spec, setup=setup))
