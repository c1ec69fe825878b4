"""Issue 19, item 2, through the whole stack: the operator's agent secrets
never reach a repository-chosen agent, and a proposal that holds one is never
published. Real webhooks against the emulator; the truth is read from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.demo.project import BUGGY_LINE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from tests.e2e import scenario

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LIBRARY = "slugify/__init__.py"
OPERATOR_KEY = "sk-operator-cli-key-e2e-0123456789abcdef"
#: The operator's agent gets this key (a CLI agent's own API key).
OPERATOR_ENV = (
    ("REPAIRBOT_AGENT_COMMAND_ENV", "CLI_AGENT_API_KEY"),
    ("CLI_AGENT_API_KEY", OPERATOR_KEY),
)
LEAKER = "agent: {backend: command, command: 'env > leaked-env.txt'}\n"


@pytest.fixture
def seed(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    folder = write_project(tmp_path / "project")
    extra = getattr(request, "param", "")
    if extra:
        config = folder / ".github" / "repairbot.yml"
        config.write_text(config.read_text() + extra)
    return folder


async def nothing_published(stack: LocalStack, number: int) -> str:
    state = await scenario.github_state(stack, number)
    assert state["pulls"] == [] and state["branches"] == ["main"]
    assert BUGGY_LINE in scenario.file_on_branch(stack, "main", LIBRARY)
    body = await scenario.status_comment(stack, number)
    assert OPERATOR_KEY not in body
    return body


@SQLITE_ONLY
@pytest.mark.parametrize("seed", [LEAKER], indirect=True)
async def test_a_repository_naming_its_own_agent_command_is_refused(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()), agent_env=OPERATOR_ENV)
    number = await scenario.open_labelled_issue(stack)
    run = await scenario.wait_end(stack, number, timeout=120)
    assert run.result is not None and run.result["outcome"] == "error", run.result
    body = await nothing_published(stack, number)
    assert "runs only its own agent command" in body


@SQLITE_ONLY
async def test_a_proposal_holding_the_operators_key_is_never_published(stack: LocalStack) -> None:
    # The operator's own agent holds the key and writes it into the change.
    leak = f'echo "$CLI_AGENT_API_KEY" > key.txt; {sys.executable} -c pass'
    stack.start_repairbot(agent_command=("sh", "-c", leak), agent_env=OPERATOR_ENV)
    number = await scenario.open_labelled_issue(stack)
    run = await scenario.wait_end(stack, number, timeout=120)
    assert run.result is not None and run.result["outcome"] == "error", run.result
    body = await nothing_published(stack, number)
    assert "contains a secret" in body and "nothing was pushed" in body
