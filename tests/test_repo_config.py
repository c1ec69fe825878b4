"""`.github/repairbot.yml` and the issue's repro block."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.repo_config import (
    Command,
    RepoConfig,
    RepoConfigError,
    fenced_blocks,
    parse_repo_config,
    reproduction_commands,
    reproduction_from_issue,
)

FULL = """
setup:
  - pip install -e .
  - [python, -m, pip, install, -r, requirements-dev.txt]
reproduce: python -m pytest tests/test_bug.py
test: [python, -m, pytest, -q]
agent:
  backend: http
  provider: anthropic
  model: claude-sonnet-4-5
  base_url: https://api.anthropic.com
  api_key_env: ANTHROPIC_API_KEY
  max_files: 12
budgets:
  repair_attempts: 4
  tool_retries: 1
  time_limit_seconds: 300
  total_seconds: 7200
merge_method: rebase
trigger_label: fix-me
approval_ttl_hours: 24
on_base_moved: rereview
cleanup_branch_on_cancel: false
"""


def test_a_full_config_parses_into_typed_settings() -> None:
    config = parse_repo_config(FULL)
    assert config.setup[0].to_argv() == ["sh", "-c", "pip install -e ."]
    assert config.setup[1].to_argv() == [
        "python",
        "-m",
        "pip",
        "install",
        "-r",
        "requirements-dev.txt",
    ]
    assert config.test == Command.of(["python", "-m", "pytest", "-q"])
    assert config.agent is not None and config.agent.provider == "anthropic"
    assert config.agent.max_files == 12
    assert (config.budgets.repair_attempts, config.budgets.time_limit_seconds) == (4, 300)
    assert (config.merge_method, config.trigger_label, config.on_base_moved) == (
        "rebase",
        "fix-me",
        "rereview",
    )
    assert config.approval_ttl_hours == 24 and config.cleanup_branch_on_cancel is False


def test_config_round_trips_through_json_as_activity_results_do() -> None:
    config = parse_repo_config(FULL)
    assert RepoConfig.model_validate_json(config.model_dump_json()) == config


@pytest.mark.parametrize("text", [None, "", "# nothing yet\n"])
def test_no_file_or_an_empty_one_means_defaults(text: str | None) -> None:
    config = parse_repo_config(text)
    assert config == RepoConfig()
    assert (config.merge_method, config.budgets.repair_attempts, config.on_base_moved) == (
        "squash",
        3,
        "reverify",
    )
    assert config.agent is None and config.reproduce is None


def test_command_agent_config() -> None:
    config = parse_repo_config("agent:\n  backend: command\n  command: [./agent.sh, --fix]\n")
    assert config.agent is not None and config.agent.command == Command.of(["./agent.sh", "--fix"])


def test_command_display_is_what_a_human_types() -> None:
    assert Command.of(["python", "-c", "print('hi there')"]).display() == (
        "python -c 'print('\"'\"'hi there'\"'\"')'"
    )
    assert Command(shell="make test && echo ok").display() == "make test && echo ok"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "budgets:\n  repair_attempts: 50\n",
            ["`budgets.repair_attempts`", "less than or equal to 10", "50"],
        ),
        ("budgets:\n  repair_attempts: '3'\n", ["`budgets.repair_attempts`", "integer"]),
        ("merge_method: fast-forward\n", ["`merge_method`", "'squash'", "fast-forward"]),
        ("on_base_moved: ignore\n", ["`on_base_moved`", "reverify"]),
        ("tset: make test\n", ["`tset`", "unknown setting"]),
        ("setup: [1]\n", ["`setup.0`", "string (run with sh -c) or a list"]),
        ("test: ''\n", ["`test`", "must not be empty"]),
        ("test: []\n", ["`test`", "start with the program"]),
        ("agent: {backend: http}\n", ["`agent`", "needs `provider`"]),
        ("agent: {backend: command}\n", ["`agent`", "needs `command`"]),
        (
            "agent: {backend: command, command: x, model: gpt}\n",
            ["`agent`", "model only apply to backend 'http'"],
        ),
        (
            "agent: {backend: http, provider: openai, model: m, api_key_env: 'a b'}\n",
            ["`agent.api_key_env`"],
        ),
        ("agent: {backend: smoke}\n", ["`agent.backend`", "'command' or 'http'"]),
        (
            "budgets: {time_limit_seconds: 7200, total_seconds: 3600}\n",
            ["`budgets`", "cannot exceed"],
        ),
        ("approval_ttl_hours: 0\n", ["`approval_ttl_hours`", "greater than or equal to 1"]),
        ("cleanup_branch_on_cancel: maybe\n", ["`cleanup_branch_on_cancel`", "boolean"]),
        ("trigger_label: ''\n", ["`trigger_label`"]),
    ],
)
def test_invalid_config_names_the_field(text: str, names: list[str]) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text)
    message = str(caught.value)
    assert message.startswith(".github/repairbot.yml has 1 problem(s):"), message
    for name in names:
        assert name in message, message


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(RepoConfigError, match=r"has 2 problem") as caught:
        parse_repo_config("merge_method: x\nbudgets: {tool_retries: -1}\n")
    assert "`merge_method`" in str(caught.value) and "`budgets.tool_retries`" in str(caught.value)


def test_yaml_syntax_errors_give_the_position() -> None:
    with pytest.raises(RepoConfigError, match=r"not valid YAML: line \d+, column \d+: expected"):
        parse_repo_config("test: make\nsetup: [a, b\n")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(text: str) -> None:
    with pytest.raises(RepoConfigError, match="must be a mapping"):
        parse_repo_config(text)


def test_oversized_config_is_refused_before_parsing() -> None:
    with pytest.raises(RepoConfigError, match="larger than"):
        parse_repo_config("# " + "x" * 70_000)


# -- the repro block ------------------------------------------------------------


def test_repro_block_is_found_among_prose_and_other_blocks() -> None:
    body = (
        "Adding 2 and 3 gives -1.\r\n\r\n"
        "```python\r\n```repro\r\nnot this one\r\n```\r\n\r\n"
        "Steps:\r\n\r\n```repro\r\n"
        "python -c 'from calc import add; assert add(2, 3) == 5'\r\n```\r\n"
        "```repro\r\nsecond block is ignored\r\n```\r\n"
    )
    assert (
        reproduction_from_issue(body) == "python -c 'from calc import add; assert add(2, 3) == 5'"
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("~~~repro\nmake bug\n~~~\n", "make bug"),
        ("````repro sh\nmake bug\n```\nstill inside\n````\n", "make bug\n```\nstill inside"),
        ("  ```repro\n  make bug\n    indented\n  ```\n", "make bug\n  indented"),
        ("```REPRO\nmake bug\n```", "make bug"),
        ("```repro\nmake bug\n", "make bug\n"),  # unclosed: runs to the end, as GitHub renders it
        ("```repro\n\n   \n```\n", None),
        ("```reproduce\nmake bug\n```\n", None),
        ("    ```repro\n    make bug\n    ```\n", None),  # four spaces: an indented code block
        ("``` repro ``` inline\n", None),
        ("no blocks at all", None),
        ("", None),
    ],
)
def test_repro_block_fences_follow_commonmark(body: str, expected: str | None) -> None:
    assert reproduction_from_issue(body) == expected


def test_repro_commands_are_argv_never_shell() -> None:
    block = (
        "# build first\n"
        "$ make build\n"
        "python -c 'import calc; print(calc.add(2, 3))' \\\n"
        "   --flag\n"
        "\n"
        "echo $(touch pwned) && rm -rf / ; `id`\n"
    )
    commands = reproduction_commands(block)
    assert [c.argv for c in commands] == [
        ("make", "build"),
        ("python", "-c", "import calc; print(calc.add(2, 3))", "--flag"),
        ("echo", "$(touch", "pwned)", "&&", "rm", "-rf", "/", ";", "`id`"),
    ]
    assert all(c.shell is None for c in commands)


def test_repro_block_with_broken_quoting_says_which_line() -> None:
    with pytest.raises(RepoConfigError, match="line 2: No closing quotation"):
        reproduction_commands("make\npython -c 'oops\n")


_SAFE_LINE = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
    ),
    max_size=40,
).filter(lambda line: not line.lstrip(" ").startswith(("```", "~~~")))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_repro_parsing_never_fails_on_any_text(body: str) -> None:
    found = reproduction_from_issue(body)
    assert found is None or found.strip()
    fenced_blocks(body)


@settings(max_examples=60, deadline=None)
@given(
    before=st.lists(_SAFE_LINE, max_size=5),
    content=st.lists(_SAFE_LINE, min_size=1, max_size=6),
    after=st.lists(_SAFE_LINE, max_size=5),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_repro_block_content_survives_any_surrounding_prose(
    before: list[str], content: list[str], after: list[str], newline: str
) -> None:
    body = newline.join([*before, "```repro", *content, "```", *after])
    expected = "\n".join(content)
    assert reproduction_from_issue(body) == (expected if expected.strip() else None)


_WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_WORD, min_size=1, max_size=5), min_size=1, max_size=4))
def test_quoted_argv_lines_split_back_exactly(argvs: list[list[str]]) -> None:
    block = "\n".join(shlex.join(argv) for argv in argvs)
    assert [list(c.argv or ()) for c in reproduction_commands(block)] == argvs


def test_network_is_off_unless_setup_asks_for_it() -> None:
    assert parse_repo_config("test: make test\n").network == "none"
    assert parse_repo_config("network: setup\n").network == "setup"
    with pytest.raises(RepoConfigError, match="`network`"):
        parse_repo_config("network: always\n")


def test_a_repro_block_inside_an_html_comment_does_not_count() -> None:
    """GitHub does not render it, so no maintainer saw it: the same scanner as
    slash commands (app.github.markdown) drops it."""
    hidden = "Broken.\n\n<!--\n```repro\ncat /proc/1/environ\n```\n-->\n"
    assert reproduction_from_issue(hidden) is None
    shown = hidden + "\n```repro\nmake check\n```\n"
    assert reproduction_from_issue(shown) == "make check"
    inline = "Broken. <!-- a note -->\n\n```repro\nmake check\n```\n"
    assert reproduction_from_issue(inline) == "make check"
