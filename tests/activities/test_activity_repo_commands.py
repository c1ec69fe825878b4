"""run_reproduction and verify_candidate on the sample repository."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from app.contracts.repo_commands import run_reproduction, verify_candidate
from app.contracts.workspace import WorkspaceSpec
from app.engine._errors import ActivityCancelled
from app.evidence import EvidenceStore
from app.repo_config import Command
from app.sandbox.quota import DiskQuota
from app.sandbox.runner import ResourceLimits, Sandbox
from tests.activities.support import PY, REPRO, TESTS, RecordingContext, call, with_patch
from tests.agent.sample_repo import FIX_DIFF, REPRO_ARGV

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


# -- the base's test run, broken commands, paths --------------------------------

PYTEST = Command.of([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
#: test_add fails on the base (the bug); test_mul passes.
BASE_FAILING = "test_calc.CalcTest::test_add"


async def test_the_tests_run_on_the_base_once_with_per_test_outcomes(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    payload = step(spec, REPRO, baseline_test=PYTEST.model_dump(mode="json"))
    result = await call(run_reproduction, actx, payload)
    assert result["reproduced"] is True and result["cannot_run"] is None
    baseline = result["baseline"]
    assert baseline["passed"] is False and baseline["base_sha"] == spec.base_sha
    assert baseline["failing"] == [BASE_FAILING] and baseline["failing_count"] == 1
    outcomes = json.loads(evidence.get(baseline["outcomes"]["sha256"]))
    assert outcomes == {BASE_FAILING: "failed", "test_calc.CalcTest::test_mul": "passed"}


async def test_without_a_report_the_baseline_has_no_outcomes(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    payload = step(spec, REPRO, baseline_test=TESTS.model_dump(mode="json"))  # unittest
    baseline = (await call(run_reproduction, actx, payload))["baseline"]
    assert baseline["passed"] is False and baseline["outcomes"] is None


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (Command.of([PY, "-m", "pytest", "--no-such-plugin-option"]), "usage error"),
        (Command.of([PY, "-m", "pytest", "-k", "nothing_matches_this"]), "no tests"),
        (Command.of(["python9.99", "-c", "pass"]), "could not be found"),
        (Command(shell="no-such-tool --check"), "could not be found"),
    ],
)
async def test_a_reproduction_that_cannot_run_is_not_a_reproduced_bug(
    actx: RecordingContext, spec: WorkspaceSpec, command: Command, says: str
) -> None:
    payload = step(spec, command, baseline_test=PYTEST.model_dump(mode="json"))
    result = await call(run_reproduction, actx, payload)
    assert result["reproduced"] is False
    assert says in result["cannot_run"]


async def test_a_reproduction_stopped_by_the_disk_quota_is_not_a_reproduced_bug(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """Killed at the quota, the command never got to show the bug: not
    reproduced (even with no test command to tell broken ones apart), and
    the log and ``cannot_run`` say why."""
    limits = ResourceLimits(disk_quota=DiskQuota(bytes=8 << 20, interval=0.05))
    actx.deps.add(Sandbox(limits=limits, heartbeat_interval=0.05))
    fill = Command(
        shell='i=0; while :; do head -c 1048576 /dev/zero > "$HOME/f$i"; i=$((i+1)); done'
    )
    result = await call(run_reproduction, actx, step(spec, fill))
    assert (result["status"], result["reproduced"]) == ("failed", False)
    reason = "the workspace exceeded its 8 MiB disk quota"
    assert result["cannot_run"] == f"it was stopped: {reason}"
    assert result["results"][0]["quota_exceeded"] == reason
    assert evidence.get(result["log"]["sha256"]).endswith(f"[killed: {reason}]\n".encode())


async def test_a_test_command_that_cannot_run_is_told(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    broken = Command.of([PY, "-m", "pytest", "--no-such-plugin-option"])
    payload = step(spec, REPRO, baseline_test=broken.model_dump(mode="json"))
    baseline = (await call(run_reproduction, actx, payload))["baseline"]
    assert "usage error" in baseline["cannot_run"]


async def test_output_names_paths_relative_to_the_repository(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    where = Command(shell='echo "at $PWD/calc.py and $HOME"; exit 3')
    result = await call(run_reproduction, actx, step(spec, where))
    tail = result["results"][0]["output_tail"]
    assert tail.strip() == "at calc.py and <workspace>/home"
    assert b"at calc.py and <workspace>/home" in evidence.get(result["log"]["sha256"])


async def baseline_of(actx: RecordingContext, spec: WorkspaceSpec) -> dict[str, Any]:
    payload = step(spec, REPRO, baseline_test=PYTEST.model_dump(mode="json"))
    return (await call(run_reproduction, actx, payload))["baseline"]  # type: ignore[no-any-return]


def judged_input(
    spec: WorkspaceSpec, evidence: EvidenceStore, patch: str, baseline: dict[str, Any]
) -> dict[str, object]:
    return verify_input(spec, evidence, patch) | {
        "test": PYTEST.model_dump(mode="json"),
        "baseline": baseline,
    }


async def test_a_fix_is_judged_by_what_it_changes(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    baseline = await baseline_of(actx, spec)
    fixed = await call(verify_candidate, actx, judged_input(spec, evidence, FIX_DIFF, baseline))
    assert fixed["verdict"] == "verified"
    assert fixed["comparison"]["fixed"] == [BASE_FAILING]
    broke = await call(verify_candidate, actx, judged_input(spec, evidence, BREAKS_MUL, baseline))
    assert broke["verdict"] == "tests-fail"
    assert broke["comparison"]["regressions"] == ["test_calc.CalcTest::test_mul"]
    assert "pass on the base commit fail with the patch applied" in broke["reason"]


async def test_a_test_that_already_fails_on_the_base_is_not_blamed(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    # The reproduction is something else than the failing test: a fix that
    # leaves test_add failing (as it was on the base) still verifies.
    baseline = await baseline_of(actx, spec)
    payload = judged_input(spec, evidence, WRONG_FIX, baseline) | {
        "reproduction": [Command.of([PY, "-c", "import calc"]).model_dump(mode="json")]
    }
    result = await call(verify_candidate, actx, payload)
    assert result["verdict"] == "verified"
    assert result["comparison"]["still_failing"] == [BASE_FAILING]
    # Without the baseline the same candidate fails verification (as before).
    payload.pop("baseline")
    assert (await call(verify_candidate, actx, payload))["verdict"] == "tests-fail"


async def test_a_test_that_fails_once_is_rerun_and_called_flaky(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    baseline = await baseline_of(actx, spec)
    flaky = FIX_DIFF + FLAKY_TEST
    result = await call(verify_candidate, actx, judged_input(spec, evidence, flaky, baseline))
    assert result["verdict"] == "verified"
    assert result["comparison"]["flaky"] == ["test_flaky::test_first_run_fails"]


#: A new test that fails the first time it runs in a workspace, then passes.
FLAKY_TEST = """diff --git a/test_flaky.py b/test_flaky.py
new file mode 100644
--- /dev/null
+++ b/test_flaky.py
@@ -0,0 +1,8 @@
+import os
+
+
+def test_first_run_fails():
+    mark = os.path.join(os.environ["TMPDIR"], "ran-once")
+    first = not os.path.exists(mark)
+    open(mark, "w").close()
+    assert not first
"""


# -- dependencies installed once per run ------------------------------------------

#: A "setup" that installs into $REPAIRBOT_ENV and counts how often it ran.
COUNTING_SETUP = Command(
    shell='test -f "$REPAIRBOT_ENV/dep.txt" && echo "already installed";'
    ' echo installed > "$REPAIRBOT_ENV/dep.txt"; echo "setup ran in $REPAIRBOT_ENV"'
)
#: The reproduction needs what setup installed.
NEEDS_DEP = Command(shell=f'test -f "$REPAIRBOT_ENV/dep.txt" && {shlex.join(REPRO_ARGV)}')


def once(spec: WorkspaceSpec, **extra: object) -> dict[str, object]:
    fields: dict[str, object] = {"reuse_env": True, **extra}
    return step(spec, NEEDS_DEP, setup=[COUNTING_SETUP.model_dump(mode="json")], **fields)


def setup_runs(result: dict[str, Any]) -> int:
    return sum(r["command"] == COUNTING_SETUP.model_dump(mode="json") for r in result["results"])


async def test_the_base_setup_runs_once_and_candidates_reuse_it(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    base = await call(run_reproduction, actx, once(spec))
    assert base["reproduced"] is True and setup_runs(base) == 1
    payload = verify_input(spec, evidence, FIX_DIFF) | {
        "setup": [COUNTING_SETUP.model_dump(mode="json")],
        "reproduction": [NEEDS_DEP.model_dump(mode="json")],
    }
    verified = await call(verify_candidate, actx, payload)
    assert verified["verdict"] == "verified", verified["reason"]
    assert verified["reproduction"]["reused_env"] is True
    assert setup_runs(verified["reproduction"]) == 0
    log = evidence.get(verified["reproduction"]["log"]["sha256"])
    assert log.startswith(b"[setup skipped: the base's setup built the environment")


async def test_candidate_code_cannot_change_the_shared_environment(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    await call(run_reproduction, actx, once(spec))
    tamper = Command(shell='echo poisoned > "$REPAIRBOT_ENV/dep.txt"')
    payload = verify_input(spec, evidence, FIX_DIFF) | {
        "setup": [COUNTING_SETUP.model_dump(mode="json")],
        "reproduction": [tamper.model_dump(mode="json")],
    }
    result = await call(verify_candidate, actx, payload)
    assert result["reproduction"]["reused_env"] is True
    assert result["verdict"] == "still-reproduces"  # the write failed: read-only
    assert "Read-only file system" in result["reproduction"]["results"][0]["output_tail"]


async def test_only_the_base_builds_the_shared_environment(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """A candidate's setup (code the model may have written) never fills the cache."""
    candidate = with_patch(spec, evidence.put(FIX_DIFF.encode(), kind="patch", name="c.patch"))
    first = await call(run_reproduction, actx, once(WorkspaceSpec.model_validate(candidate)))
    assert setup_runs(first) == 1 and first["reused_env"] is False
    base = await call(run_reproduction, actx, once(spec))
    assert setup_runs(base) == 1  # nothing was cached by the candidate


async def test_a_changed_dependency_file_runs_setup_again(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    await call(run_reproduction, actx, once(spec))
    adds_requirements = FIX_DIFF + (
        "diff --git a/requirements.txt b/requirements.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/requirements.txt\n@@ -0,0 +1 @@\n+left-pad==1.0\n"
    )
    payload = verify_input(spec, evidence, adds_requirements) | {
        "setup": [COUNTING_SETUP.model_dump(mode="json")],
        "reproduction": [NEEDS_DEP.model_dump(mode="json")],
    }
    result = await call(verify_candidate, actx, payload)
    assert result["verdict"] == "verified", result["reason"]
    assert result["reproduction"]["reused_env"] is False
    assert setup_runs(result["reproduction"]) == 1
    log = evidence.get(result["reproduction"]["log"]["sha256"])
    # Offline, in a copy of what the base's setup installed.
    assert log.startswith(b"[the patch changes a dependency file")
    assert b"already installed" in log


async def test_a_later_run_with_the_same_dependency_files_reuses_the_environment(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    first = await call(run_reproduction, actx, once(spec))
    later = await call(run_reproduction, actx, once(spec))
    assert setup_runs(first) == 1 and setup_runs(later) == 0 and later["reused_env"] is True


#: A setup that writes into the checkout and names its absolute path there and
#: in $REPAIRBOT_ENV (as an editable install's ``.pth`` file does).
IN_CHECKOUT_SETUP = Command(
    shell='mkdir -p .deps/__pycache__ && echo "$PWD/src" > .deps/project.pth'
    ' && echo "$PWD" > "$REPAIRBOT_ENV/checkout.pth"'
    # Bytecode names its source by absolute path, in binary: Python rebuilds it.
    " && printf '\\0%s' \"$PWD/.deps/x.py\" > .deps/__pycache__/x.cpython-311.pyc"
)
#: The reproduction needs both to name the checkout it runs in.
NEEDS_CHECKOUT = Command(
    shell='test "$(cat .deps/project.pth)" = "$PWD/src"'
    ' && test "$(cat "$REPAIRBOT_ENV/checkout.pth")" = "$PWD"'
    f" && {shlex.join(REPRO_ARGV)}"
)


def in_checkout_payload(
    spec: WorkspaceSpec, evidence: EvidenceStore, setup: Command, diff: str = FIX_DIFF
) -> dict[str, object]:
    return verify_input(spec, evidence, diff) | {
        "setup": [setup.model_dump(mode="json")],
        "reproduction": [NEEDS_CHECKOUT.model_dump(mode="json")],
    }


async def test_a_setup_that_writes_into_the_checkout_is_carried_to_the_candidate(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    setup = [IN_CHECKOUT_SETUP.model_dump(mode="json")]
    base = await call(
        run_reproduction, actx, step(spec, NEEDS_CHECKOUT, setup=setup, reuse_env=True)
    )
    assert base["reproduced"] is True, base
    result = await call(
        verify_candidate, actx, in_checkout_payload(spec, evidence, IN_CHECKOUT_SETUP)
    )
    assert result["verdict"] == "verified", result["reason"]
    assert result["reproduction"]["reused_env"] is True
    assert len(result["reproduction"]["results"]) == 1  # setup did not run


async def test_what_the_base_commands_leave_in_the_checkout_is_not_carried(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """Only setup's effects are carried: a file the base's reproduction wrote
    into its checkout never appears in a candidate's."""
    setup = [IN_CHECKOUT_SETUP.model_dump(mode="json")]
    leaves = Command(shell=f"echo leftover > leftover.txt; {NEEDS_CHECKOUT.shell}")
    await call(run_reproduction, actx, step(spec, leaves, setup=setup, reuse_env=True))
    looks = Command(shell=f"test ! -e leftover.txt && {NEEDS_CHECKOUT.shell}")
    payload = in_checkout_payload(spec, evidence, IN_CHECKOUT_SETUP) | {
        "reproduction": [looks.model_dump(mode="json")]
    }
    result = await call(verify_candidate, actx, payload)
    assert result["reproduction"]["reused_env"] is True
    assert result["verdict"] == "verified", result["reason"]


async def test_a_binary_naming_the_checkout_makes_setup_run_again(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """A path inside a compiled file cannot be rewritten: no other checkout reuses it."""
    binary = Command(shell=f"{IN_CHECKOUT_SETUP.shell} && printf '\\0%s' \"$PWD\" > .deps/ext.so")
    setup = [binary.model_dump(mode="json")]
    await call(run_reproduction, actx, step(spec, NEEDS_CHECKOUT, setup=setup, reuse_env=True))
    result = await call(verify_candidate, actx, in_checkout_payload(spec, evidence, binary))
    assert result["verdict"] == "verified", result["reason"]
    assert result["reproduction"]["reused_env"] is False
    assert len(result["reproduction"]["results"]) == 2  # setup ran again


async def test_a_project_installed_by_copy_makes_setup_run_again(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    """pip's record of a non-editable install from the checkout: the base's code
    sits in the environment, so a candidate must install its own."""
    record = 'echo "{\\"url\\": \\"file://$PWD\\", \\"dir_info\\": {}}"'
    copied = Command(
        shell=f'{IN_CHECKOUT_SETUP.shell} && {record} > "$REPAIRBOT_ENV/direct_url.json"'
    )
    setup = [copied.model_dump(mode="json")]
    await call(run_reproduction, actx, step(spec, NEEDS_CHECKOUT, setup=setup, reuse_env=True))
    result = await call(verify_candidate, actx, in_checkout_payload(spec, evidence, copied))
    assert result["verdict"] == "verified", result["reason"]
    assert result["reproduction"]["reused_env"] is False


async def test_without_setup_once_setup_runs_every_step(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    first = await call(run_reproduction, actx, once(spec, reuse_env=False))
    second = await call(run_reproduction, actx, once(spec, reuse_env=False))
    assert setup_runs(first) == setup_runs(second) == 1


async def test_a_directory_planted_where_the_report_goes_is_not_a_crash(
    actx: RecordingContext, spec: WorkspaceSpec
) -> None:
    plant = Command(shell='mkdir -p "$TMPDIR/repairbot-junit.xml/x"; exit 1')
    payload = step(spec, plant, baseline_test=PYTEST.model_dump(mode="json"))
    result = await call(run_reproduction, actx, payload)
    assert result["reproduced"] is True
    assert result["baseline"]["outcomes"] is None  # no report could be read


async def test_unittest_suites_are_compared_per_test_too(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    verbose = Command.of([PY, "-m", "unittest", "-v"])
    payload = step(spec, REPRO, baseline_test=verbose.model_dump(mode="json"))
    baseline = (await call(run_reproduction, actx, payload))["baseline"]
    assert baseline["failing"] == [BASE_FAILING]
    judged = verify_input(spec, evidence, BREAKS_MUL) | {
        "test": verbose.model_dump(mode="json"),
        "baseline": baseline,
    }
    broke = await call(verify_candidate, actx, judged)
    assert broke["verdict"] == "tests-fail"
    assert broke["comparison"]["regressions"] == ["test_calc.CalcTest::test_mul"]
