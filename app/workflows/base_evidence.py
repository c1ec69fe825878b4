"""Words for what the base commit showed: a command that cannot run, a setup
that fails, the tests' result there, and how a candidate's tests compare.

Pure functions (workflow code): each result goes into the run's detail, which
the status comment, the check run and the run's API detail all show, so the
three always say the same thing.
"""

from __future__ import annotations

from app.contracts.repo_commands import BaselineTests, Comparison, ReproductionResult, named
from app.github.markdown import code_block
from app.repo_config import CONFIG_PATH
from app.sandbox.runner import CommandResult
from app.workflows.report import TESTS_GREEN

RETRY = "then comment `/repair retry`."
#: Output quoted in a comment: the end, where the error is.
_QUOTED_CHARS = 1500


def quoted(result: CommandResult) -> str:
    """The end of the command's output as a code block nothing inside can close."""
    return code_block((result.output_tail or result.output_head).strip()[-_QUOTED_CHARS:])


def _ending(result: CommandResult) -> str:
    return "timed out" if result.timed_out else f"exited with {result.exit_code}"


def broken_command(which: str, result: CommandResult, why: str) -> tuple[str, str]:
    """(detail, next steps) for a reproduction or test command that cannot run."""
    setting = "reproduce" if which == "reproduction" else "test"
    detail = (
        f"The {which} command cannot run on the base commit, so its failure says nothing "
        f"about the bug: `{result.command.display()}` {_ending(result)}: {why}. "
        "No agent attempt was made.\n\n" + quoted(result)
    )
    where = f"`{setting}:` in `{CONFIG_PATH}`"
    if which == "reproduction":
        where += " (or the issue's repro block)"
    steps = (
        f"Change {where} so that it runs on the base commit; install what it needs "
        f"(a tool, a pytest plugin, the package itself) with `setup:`, {RETRY}"
    )
    return detail, steps


def setup_failed(result: ReproductionResult) -> tuple[str, str]:
    failing = result.failing
    detail = "The `setup` commands fail on the base commit, so nothing could be reproduced."
    if failing is not None:
        detail = (
            f"The `setup` commands fail on the base commit, so nothing could be reproduced: "
            f"`{failing.command.display()}` {_ending(failing)}.\n\n" + quoted(failing)
        )
    steps = (
        f"Fix `setup:` in `{CONFIG_PATH}` (with `network: setup` if it downloads "
        f"dependencies), {RETRY}"
    )
    return detail, steps


def baseline_sentence(baseline: BaselineTests) -> str:
    if baseline.passed:
        return "Repository tests on the base commit: pass."
    if baseline.failing_count:
        return (
            f"Repository tests on the base commit: {baseline.failing_count} test(s) already "
            f"fail there ({named(baseline.failing)}); a fix is not blamed for them."
        )
    return (
        "Repository tests on the base commit: the test command fails there "
        f"({_ending(baseline.step.results[-1])}) without per-test results; "
        "a fix is judged by comparing exit statuses."
    )


def comparison_sentence(comparison: Comparison) -> str:
    if comparison.candidate_passed:
        parts = [TESTS_GREEN]
    elif comparison.basis == "exit-status":
        parts = [
            "Repository tests with the fix: fail, as on the base commit. Without a per-test "
            "report only exit statuses could be compared, so the failure is not blamed on "
            "the fix; check the test log."
        ]
    else:
        parts = ["Repository tests with the fix: no test that passes on the base commit fails."]
    if comparison.still_failing:
        parts.append(
            f"Still failing, as on the base commit (not caused by the fix): "
            f"{named(comparison.still_failing)}."
        )
    if comparison.fixed:
        parts.append(f"Fixed by it: {named(comparison.fixed)}.")
    if comparison.flaky:
        parts.append(f"Flaky (failed once, passed when run again): {named(comparison.flaky)}.")
    return " ".join(parts)
