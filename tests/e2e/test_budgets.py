"""Every budget of a run driven to exhaustion through the workflow, over real
webhooks against the emulator: repair attempts (after a "changes requested"
review, with the pull request open), agent tool retries, model tokens and
model cost (priced by the operator's ``REPAIRBOT_AGENT_PRICES``; the built-in
agent stops mid-attempt at the model call that reaches them) and working time
(the run deadline fires in the middle of the agent, which is stopped).

Each case asserts the run's end, the final status comment (the budget usage
and the pull request's true state), the check run's conclusion, and GitHub's
state read from the emulator: pull requests and branches.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.contracts.ids import repair_branch
from app.demo.project import BUGGY_LINE, fix_agent_command, write_project
from app.demo.run import builtin_agent_env, demo_test_command
from app.demo.scripted_model import demo_repair_script
from app.demo.stack import LocalStack
from tests.agent.fake_llm import FakeLLM
from tests.e2e import scenario

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
LIBRARY = "slugify/__init__.py"
DEMO_BUDGETS = "budgets: {repair_attempts: 3, time_limit_seconds: 120}\n"
#: The scripted model's turns and what each one reports using.
TURNS = len(demo_repair_script())
TOKENS_PER_TURN = 900 + 60


def budgets(line: str) -> pytest.MarkDecorator:
    """Give the demo repository's config this ``budgets:`` mapping."""
    return pytest.mark.parametrize("seed", [line], indirect=True)


@pytest.fixture
def seed(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    folder = write_project(tmp_path / "project")
    config = folder / ".github" / "repairbot.yml"
    text = config.read_text()
    assert DEMO_BUDGETS in text
    config.write_text(text.replace(DEMO_BUDGETS, f"budgets: {request.param}\n"))
    return folder


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    with FakeLLM(demo_repair_script(demo_test_command())) as server:
        yield server


def start_builtin_agent(stack: LocalStack, model: FakeLLM, **extra_env: str) -> None:
    """repairbot in-process, with the built-in agent against the scripted model."""
    env = builtin_agent_env(model.openai_url) | extra_env
    stack.start_repairbot(agent_env=tuple(env.items()))


async def assert_no_pull_request(stack: LocalStack, number: int) -> str:
    """Nothing published: no pull request, no branch, main untouched; the
    status comment says so. Returns the status comment."""
    state = await scenario.github_state(stack, number)
    assert state["pulls"] == []
    assert state["branches"] == ["main"]
    assert BUGGY_LINE in scenario.file_on_branch(stack, "main", LIBRARY)
    body = await scenario.status_comment(stack, number)
    assert "No pull request was opened." in body
    return body


async def base_check(stack: LocalStack, number: int) -> str:
    """The conclusion of repairbot's completed check run on the base commit."""
    assert stack.runtime is not None
    run = stack.runtime.store.find_run(scenario.workflow_id(stack, number))
    assert run is not None and run.result is not None
    check = await scenario.final_check(stack, run.result["base_sha"])
    return str(check["conclusion"])


# -- attempts: a review asks for changes after the last one ------------------------------


@SQLITE_ONLY
@budgets("{repair_attempts: 1, time_limit_seconds: 120}")
async def test_changes_requested_after_the_last_attempt_keeps_the_pull_request_open(
    stack: LocalStack,
) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await scenario.open_labelled_issue(stack)
    status = await scenario.wait_phase(stack, number, "awaiting-review", timeout=120)
    await scenario.wait_status_comment(stack, number, "Waiting for a review", timeout=60)
    await scenario.review(stack, status["pull_number"], "REQUEST_CHANGES", body="Not like this.")

    run = await scenario.wait_end(stack, number, timeout=120)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "budget-exhausted", run.result
    assert len(scenario.scheduled(stack, number, "agent.propose_fix")) == 1
    # GitHub: the pull request stays open, its branch at the proposal.
    state = await scenario.github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["state"] == "open" and pull["merged_at"] is None
    branch = repair_branch(number)
    assert branch in state["branches"]
    assert pull["head"]["sha"] == status["proposed_sha"]
    body = await scenario.status_comment(stack, number)
    assert f"Pull request: #{pull['number']} (open)" in body
    assert "No pull request was opened" not in body
    assert "Repair attempts: 1 of 1" in body
    assert "all 1 repair attempt(s) are spent" in body
    assert "Change the pull request yourself" in body
    check = await scenario.final_check(stack, status["proposed_sha"])
    assert check["conclusion"] == "failure"


# -- tool retries --------------------------------------------------------------------------


@SQLITE_ONLY
@budgets("{repair_attempts: 1, tool_retries: 1, time_limit_seconds: 120}")
async def test_an_agent_that_keeps_failing_spends_its_tool_retries(stack: LocalStack) -> None:
    """The agent exits 1 every time (the text it is told to replace is not
    there): retried once (``tool_retries: 1``), then the attempt is spent."""
    script = Path(fix_agent_command()[1])
    failing = [sys.executable, str(script), "--path", LIBRARY, "--old", "no such text"]
    stack.start_repairbot(agent_command=(*failing, "--new", "no such fix"))
    number = await scenario.open_labelled_issue(stack)

    run = await scenario.wait_end(stack, number, timeout=120)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "budget-exhausted", run.result
    assert stack.runtime is not None
    attempts = [
        a
        for a in stack.runtime.store.activity_attempts(run.run_id)
        if a["activity"] == "agent.propose_fix"
    ]
    # One try and one retry, no more.
    assert [a["attempt"] for a in attempts] == [1, 2], attempts
    body = await assert_no_pull_request(stack, number)
    assert "Agent tool retries: 1 (up to 1 per attempt)" in body
    assert "Repair attempts: 1 of 1" in body
    assert "agent-failed" in body
    assert await base_check(stack, number) == "neutral"


# -- tokens and cost (the built-in agent against a scripted model) ---------------------


def turns_to_reach(cap: float, per_turn: float) -> int:
    """Model calls the built-in loop makes before a run cap stops it: it checks
    before each call, so the call that reaches the cap is the last."""
    turns = math.ceil(cap / per_turn)
    assert turns < TURNS, "the cap must bind before the scripted repair ends"
    return turns


async def spent_in_one_attempt(stack: LocalStack, number: int, model: FakeLLM, turns: int) -> str:
    """The run ended ``cost-budget-exhausted`` in its first attempt: the loop
    stopped after ``turns`` model calls, each asked once; no second attempt,
    nothing to verify, nothing published. The status comment."""
    run = await scenario.wait_end(stack, number, timeout=180)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "cost-budget-exhausted", run.result
    assert model.turns_asked() == list(range(turns))
    assert len(scenario.scheduled(stack, number, "agent.propose_fix")) == 1
    assert scenario.scheduled(stack, number, "commands.verify_candidate") == []
    body = await assert_no_pull_request(stack, number)
    assert "Stopped: the run used up its model token or cost budget." in body
    return body


@SQLITE_ONLY
@budgets("{repair_attempts: 2, time_limit_seconds: 120, max_tokens: 3000}")
async def test_the_token_budget_ends_the_run(stack: LocalStack, model: FakeLLM) -> None:
    start_builtin_agent(stack, model)
    number = await scenario.open_labelled_issue(stack)

    turns = turns_to_reach(3000, TOKENS_PER_TURN)
    body = await spent_in_one_attempt(stack, number, model, turns)
    tokens = turns * TOKENS_PER_TURN
    assert f"Model tokens: {tokens} of 3000" in body
    assert f"{tokens} tokens used of 3000." in body
    assert await base_check(stack, number) == "neutral"


@SQLITE_ONLY
@budgets("{repair_attempts: 2, time_limit_seconds: 120, max_cost_usd: 0.05}")
async def test_the_cost_budget_ends_the_run_at_the_operators_prices(
    stack: LocalStack, model: FakeLLM
) -> None:
    # $10 per million input tokens, $30 per million output tokens.
    prices = {"scripted-demo": {"input_per_mtok": 10.0, "output_per_mtok": 30.0}}
    start_builtin_agent(stack, model, REPAIRBOT_AGENT_PRICES=json.dumps(prices))
    number = await scenario.open_labelled_issue(stack)

    per_turn = (900 * 10.0 + 60 * 30.0) / 1e6
    turns = turns_to_reach(0.05, per_turn)
    body = await spent_in_one_attempt(stack, number, model, turns)
    cost = turns * per_turn
    assert f"cost ${cost:.4f} of $0.05" in body
    assert f"${cost:.4f} spent of $0.05." in body
    assert await base_check(stack, number) == "neutral"


# -- working time: the deadline fires in the middle of the agent ------------------------

#: A sleep no other test uses, so the agent's process is recognisable.
AGENT_SLEEP = 587.25


def agent_processes() -> list[int]:
    """Processes of the sleeping demo agent (any namespace: read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fix_known_bug.py" in b" ".join(argv) and str(AGENT_SLEEP).encode() in argv:
            found.append(int(entry.name))
    return found


@SQLITE_ONLY
@pytest.mark.slow
@pytest.mark.timeout(300)  # a minute of budget by construction, then cleanup
@budgets("{repair_attempts: 2, time_limit_seconds: 60, total_seconds: 60}")
async def test_the_run_deadline_stops_the_agent_in_flight(stack: LocalStack) -> None:
    """``total_seconds: 60`` (the least allowed) and an agent that would think
    for ten minutes: the deadline fires mid-agent, the agent's process is
    killed, its workspace removed, and the run ends time-budget-exhausted."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command(sleep=AGENT_SLEEP)))
    scenario.heartbeat_every(stack, 0.2)
    assert stack.settings is not None
    workspaces = stack.settings.workspaces_dir
    number = await scenario.open_labelled_issue(stack)
    await scenario.wait_phase(stack, number, "repairing", timeout=60)
    await scenario.wait_for("the agent is running", lambda: bool(agent_processes()), timeout=60)

    run = await scenario.wait_end(stack, number, timeout=180)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "time-budget-exhausted", run.result
    # The agent was stopped, not left to think: its process is gone and its
    # workspace removed by the time the run reported its end.
    assert agent_processes() == []
    assert not workspaces.exists() or list(workspaces.iterdir()) == []
    assert stack.runtime is not None
    history = stack.runtime.store.load_events(run.run_id)
    [propose] = [e for e in history if e.data.get("activity") == "agent.propose_fix"
                 and e.type == "activity_scheduled"]  # fmt: skip
    [stop] = [e for e in history if e.type == "activity_cancel_requested"]
    assert stop.data["target"] == propose.data["cmd"]
    [ended] = [e for e in history if e.type in ("activity_completed", "activity_failed")
               and e.data.get("cmd") == propose.data["cmd"]]  # fmt: skip
    assert ended.type == "activity_failed" and ended.data["failure_class"] == "cancelled"
    assert ended.seq > stop.seq
    body = await assert_no_pull_request(stack, number)
    assert "Stopped: the run used up its time budget." in body
    assert "ran out in the middle of an attempt" in body
    spent = re.search(r"Working time: (\d+)s of 60s", body)
    assert spent is not None and 60 <= int(spent.group(1)) < 90, body
    assert await base_check(stack, number) == "neutral"
    scenario.record_history(stack, number, "repair_v2_time_budget_stops_the_agent")
