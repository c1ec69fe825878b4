"""The words for what the base commit showed (pure functions of recorded results)."""

from __future__ import annotations

from app.contracts.repo_commands import Comparison
from app.repo_config import Command
from app.sandbox.runner import CommandResult
from app.workflows.base_evidence import broken_command, comparison_sentence, quoted
from app.workflows.report import TESTS_GREEN


def result(output: str, exit_code: int = 4) -> CommandResult:
    return CommandResult(
        command=Command(shell="python -m pytest --field-seed=3"),
        exit_code=exit_code,
        duration_seconds=0.2,
        timed_out=False,
        total_bytes=len(output),
        truncated=False,
        output_head="",
        output_tail=output,
    )


def test_output_cannot_close_its_code_block() -> None:
    hostile = "error\n```\n@everyone [click](http://evil)\n````\n"
    block = quoted(result(hostile))
    fence = block.split("text", 1)[0]
    assert len(fence) == 5 and block.endswith("\n" + fence)
    assert block.count(fence) == 2  # the opening and the closing, nothing inside


def test_a_broken_reproduction_says_what_and_where_to_change() -> None:
    detail, steps = broken_command("reproduction", result("unrecognized arguments"), "usage")
    assert detail.startswith("The reproduction command cannot run on the base commit")
    assert "`python -m pytest --field-seed=3` exited with 4: usage." in detail
    assert "No agent attempt was made." in detail and "unrecognized arguments" in detail
    assert "`reproduce:` in `.github/repairbot.yml`" in steps and "`setup:`" in steps


def test_a_broken_test_command_points_at_test() -> None:
    _, steps = broken_command("test", result("no tests ran", 5), "no tests")
    assert steps.startswith("Change `test:` in `.github/repairbot.yml` so that")


def test_the_comparison_in_words() -> None:
    green = Comparison(ok=True, candidate_passed=True, basis="per-test", fixed=["t::a"])
    assert comparison_sentence(green).startswith(TESTS_GREEN)
    kept = Comparison(ok=True, candidate_passed=False, basis="per-test", still_failing=["t::b"])
    assert "no test that passes on the base commit fails" in comparison_sentence(kept)
    assert "`t::b`" in comparison_sentence(kept)
    blind = Comparison(ok=True, candidate_passed=False, basis="exit-status")
    assert "only exit statuses could be compared" in comparison_sentence(blind)
