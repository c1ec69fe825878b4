"""run_reproduction and verify_candidate on the sample repository."""

from __future__ import annotations

from typing import Any

import pytest

from activities.repo_commands import run_reproduction, verify_candidate
from activities.workspace import WorkspaceSpec
from app.engine.errors import ActivityCancelled
from app.evidence import EvidenceStore
from app.repo_config import Command
from tests.activities.support import PY, REPRO, TESTS, RecordingContext, call, with_patch
from tests.agent.sample_repo import FIX_DIFF

BREAKS_MUL = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -2,8 +2,8 @@


 def add(a, b):
-    return a - b
+    return a + b


 def mul(a, b):
-    return a * b
+    return a ** b
"""
WRONG_FIX = FIX_DIFF.replace("+    return a + b", "+    return a * b")


def step(spec: WorkspaceSpec, *commands: Command, **extra: object) -> dict[str, object]:
    return {
        "workspace": spec.model_dump(mode="json"),
        "commands": [c.model_dump(mode="json") for c in commands],
        "time_limit_seconds": 30,
        **extra,
    }


async def test_reproduction_fails_on_the_base(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    result = await call(run_reproduction, actx, step(spec, REPRO))
    assert (result["status"], result["reproduced"]) == ("failed", True)
    only = result["results"][0]
    assert only["exit_code"] == 1 and "AssertionError: -1" in only["output_tail"]
    log = evidence.get(result["log"]["sha256"])
    assert log.startswith(f"$ {REPRO.display()}    # reproduce; sandbox: no network\n".encode())
    assert b"AssertionError: -1" in log and log.endswith(
        b"[exit 1 after " + log.split(b"[exit 1 after ")[1]
    )
    assert result["log"]["kind"] == "reproduce-log"
    assert result["log"]["name"] == f"reproduce-on-base-{spec.base_sha[:12]}.log"


async def test_a_missing_program_does_not_count_as_reproduced(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    result = await call(run_reproduction, actx, step(spec, Command.of(["no-such-tool"])))
    assert (result["status"], result["reproduced"]) == ("failed", False)


async def test_setup_runs_first_and_its_failure_is_not_a_reproduction(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    setup = [Command(shell="echo installing; exit 4")]
    payload = step(spec, REPRO, setup=[c.model_dump(mode="json") for c in setup])
    result = await call(run_reproduction, actx, payload)
    assert (result["status"], result["reproduced"]) == ("setup-failed", False)
    assert len(result["results"]) == 1  # the reproduction did not run
    assert (
        b"$ echo installing; exit 4    # setup; sandbox: no network\ninstalling\n[exit 4"
        in evidence.get(result["log"]["sha256"])
    )


def verify_input(spec: WorkspaceSpec, evidence: EvidenceStore, patch: str) -> dict[str, object]:
    ref = evidence.put(patch.encode(), kind="patch", name="candidate.patch")
    return {
        "workspace": with_patch(spec, ref),
        "setup": [{"shell": "echo setup"}],
        "reproduction": [REPRO.model_dump(mode="json")],
        "test": TESTS.model_dump(mode="json"),
        "time_limit_seconds": 30,
    }


async def test_the_fix_verifies(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    payload = verify_input(spec, evidence, FIX_DIFF)
    result = await call(verify_candidate, actx, payload)
    assert result["verdict"] == "verified" and result["reason"] is None
    assert result["patch_sha256"] == payload["workspace"]["patch"]["sha256"]  # type: ignore[index]
    assert result["reproduction"]["status"] == result["tests"]["status"] == "passed"
    assert result["reproduction"]["results"][0]["command"] == {
        "argv": None,
        "shell": "echo setup",
    }


async def test_a_wrong_fix_still_reproduces(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    result = await call(verify_candidate, actx, verify_input(spec, evidence, WRONG_FIX))
    assert result["verdict"] == "still-reproduces" and result["tests"] is None
    assert result["reason"].startswith("The reproduction still fails with the patch applied: `")
    assert "AssertionError: 6" in result["reason"]


async def test_a_fix_that_breaks_other_tests(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    result = await call(verify_candidate, actx, verify_input(spec, evidence, BREAKS_MUL))
    assert result["verdict"] == "tests-fail"
    assert "test_mul" in result["reason"] and result["reproduction"]["status"] == "passed"


async def test_a_patch_that_does_not_apply(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    result = await call(
        verify_candidate, actx, verify_input(spec, evidence, FIX_DIFF.replace("a - b", "a % b"))
    )
    assert result["verdict"] == "patch-rejected" and "does not apply" in result["reason"]


async def test_cancellation_stops_the_command_and_removes_the_workspace(
    deps: object, spec: WorkspaceSpec
) -> None:
    slow = Command.of([PY, "-c", "import time; time.sleep(60)"])

    def once_the_command_runs(beats: list[Any]) -> bool:
        return any("command" in beat for beat in beats)

    actx = RecordingContext(deps, cancel_when=once_the_command_runs)  # type: ignore[arg-type]
    with pytest.raises(ActivityCancelled):
        await call(run_reproduction, actx, step(spec, slow))
    assert actx.heartbeats[-1]["command"] == slow.display()


async def test_a_command_timeout_is_a_failed_step(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    slow = Command(shell="echo start; sleep 30")
    result = await call(run_reproduction, actx, step(spec, slow) | {"time_limit_seconds": 0.3})
    assert result["status"] == "failed" and result["results"][0]["timed_out"]
    assert b"[killed: time limit reached after 0." in evidence.get(result["log"]["sha256"])


async def test_only_setup_gets_the_network_and_only_when_asked(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    # The network is the egress proxy (app/sandbox/egress.py), never the host's interfaces.
    interfaces = Command(shell="tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; env")
    setup = [interfaces.model_dump(mode="json")]
    asked = await call(run_reproduction, actx, step(spec, REPRO, setup=setup, setup_network=True))
    first, second = asked["results"]
    assert first["network"] is True and first["output_tail"].split()[0] == "lo"
    assert "HTTPS_PROXY=http://127.0.0.1:3128" in first["output_tail"]
    assert second["network"] is False  # the reproduction never has it
    log = evidence.get(asked["log"]["sha256"])
    assert b"# setup; sandbox: network\n" in log and b"# reproduce; sandbox: no network" in log
    default = await call(run_reproduction, actx, step(spec, REPRO, setup=setup))
    assert default["results"][0]["network"] is False
    assert "HTTPS_PROXY" not in default["results"][0]["output_tail"]


async def test_the_candidates_setup_never_gets_the_network(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """Model-written code runs without network even when the repository asks for it."""
    payload = verify_input(spec, evidence, FIX_DIFF) | {
        "setup": [{"shell": "env | grep -c PROXY || true"}],
        "setup_network": True,
    }
    result = await call(verify_candidate, actx, payload)
    setup = result["reproduction"]["results"][0]
    assert setup["network"] is False and setup["output_tail"].split() == ["0"]
    assert result["verdict"] == "verified"
