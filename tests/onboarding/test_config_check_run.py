"""The check run on a pull request that changes ``.github/repairbot.yml``:
what it says for each kind of change (pure), and that repository text cannot
break out of the code blocks it is quoted in."""

from __future__ import annotations

from app.contracts.config_check import ConfigChange
from app.workflows.config_check import view_of


def test_an_invalid_file_fails_with_line_and_field() -> None:
    text = "test: make test\nbudgets:\n  repair_attempts: -1\nnetwrk: setup\n"
    view = view_of(ConfigChange(changed=True, text=text))
    assert view.conclusion == "failure"
    assert view.title == "2 problems in .github/repairbot.yml"
    assert ".github/repairbot.yml:3: budgets.repair_attempts:" in view.summary
    assert ".github/repairbot.yml:4: netwrk: unknown setting" in view.summary


def test_broken_yaml_names_its_line() -> None:
    view = view_of(ConfigChange(changed=True, text="test: [unclosed\n"))
    assert view.conclusion == "failure" and "line 2" in view.summary


def test_a_valid_file_succeeds_and_says_how_it_is_read() -> None:
    view = view_of(ConfigChange(changed=True, text="test: make test\nnetwork: setup\n"))
    assert view.conclusion == "success"
    assert "network: setup" in view.summary and "test: set" in view.summary


def test_a_removed_file_is_neutral_and_says_what_follows() -> None:
    view = view_of(ConfigChange(changed=True, deleted=True))
    assert view.conclusion == "neutral" and "does not run" in view.summary


def test_an_unreadable_file_fails() -> None:
    view = view_of(ConfigChange(changed=True, problem=".github/repairbot.yml is not UTF-8 text"))
    assert view.conclusion == "failure" and "not UTF-8" in view.summary


def test_repository_text_stays_inside_its_code_block() -> None:
    hostile = 'test: make\n"x````[click](https://evil.example) @everyone": 1\n'
    view = view_of(ConfigChange(changed=True, text=hostile))
    assert view.conclusion == "failure" and "````" in view.summary
    fence = view.summary.split("\n\n", 1)[1].split("text\n", 1)[0]
    assert len(fence) >= 5  # longer than the longest backtick run in the file
    assert view.summary.rstrip().endswith(fence)
