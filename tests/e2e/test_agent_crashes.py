"""The built-in agent survives its worker being SIGKILLed mid-loop (recovery
tests 1 and 2 for the agent; recovery test 1 also directly, during a model call).

A real worker process runs the repair with the built-in agent against a
scripted OpenAI-compatible model served over HTTP from this test process.
The worker kills itself at a fault point inside the loop: right after the
model's answer is recorded, or after a tool call returned but before its
result is recorded (the tool is the non-idempotent changelog append). A
fresh worker resumes the agent activity from its last checkpoint. Checked
outside repairbot's own tables: the model saw each turn asked exactly once,
and the merged main branch holds the changelog line exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.demo.project import FIXED_LINE, write_project
from app.demo.run import WorkerProcess, builtin_agent_env, demo_test_command
from app.demo.scripted_model import CHANGELOG_ENTRY, demo_repair_script
from app.demo.stack import LocalStack
from tests.agent.fake_llm import FakeLLM
from tests.e2e.scenario import (
    activity_results,
    file_on_branch,
    github_state,
    run_through_a_kill,
    wait_for,
)

TURNS = len(demo_repair_script())


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    with FakeLLM(demo_repair_script(demo_test_command())) as server:
        yield server


def two_workers(
    stack: LocalStack, model: FakeLLM, tmp_path: Path, *, fault: str = ""
) -> tuple[WorkerProcess, WorkerProcess]:
    """repairbot's web in-process, and two worker processes (not started) with
    the built-in agent against ``model``: one to die (at ``fault`` if given),
    one to take over."""
    assert stack.settings is not None
    settings = stack.settings.with_overrides(
        relay_grace=0.2, reconcile_interval=0.1, worker_silence=2.0
    )
    stack.settings = settings
    stack.start_repairbot(run_worker=False)
    env = builtin_agent_env(model.openai_url)
    doomed = WorkerProcess(
        settings.with_overrides(fault_point=fault), tmp_path / "doomed.log", extra_env=env
    )
    return doomed, WorkerProcess(settings, tmp_path / "fresh.log", extra_env=env)


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "fault",
    [
        # recovery test 2: the append ran (5th tool call); its result is not recorded
        "agent.tool_returned:agent.propose_fix@5",
        # recovery test 1: the model answered turn 3 and the answer is recorded
        "agent.model_recorded:agent.propose_fix@4",
    ],
)
async def test_the_agent_loop_resumes_after_a_sigkill(
    stack: LocalStack, model: FakeLLM, fault: str, tmp_path: Path
) -> None:
    doomed, fresh = two_workers(stack, model, tmp_path, fault=fault)
    asked_before_kill: list[int] = []
    number, run = await run_through_a_kill(
        stack,
        doomed,
        fresh,
        timeout=180,
        before_fresh=lambda: asked_before_kill.extend(model.turns_asked()),
    )
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged"
    # The worker died mid-loop, then no turn already answered was asked again.
    assert 0 < len(asked_before_kill) < TURNS
    assert model.turns_asked() == list(range(TURNS))
    # The edits landed exactly once, as GitHub holds them.
    state = await github_state(stack, number)
    assert [p["merged_at"] is not None for p in state["pulls"]] == [True]
    assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")
    assert file_on_branch(stack, "main", "CHANGES.md").count(CHANGELOG_ENTRY) == 1


#: The turn asked right after the changelog append (turn 4's tool call) ran.
AFTER_THE_APPEND = 5


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_worker_killed_during_a_model_call_asks_that_turn_again(
    stack: LocalStack, model: FakeLLM, tmp_path: Path
) -> None:
    """Recovery test 1, direct: the scripted model holds the request for turn
    5 unanswered until the worker waiting on it is SIGKILLed. A fresh worker
    resumes the agent from its last checkpoint: the interrupted turn is asked
    again (its answer was never recorded), every other turn once, and the
    changelog append made before the kill is not made again."""
    doomed, fresh = two_workers(stack, model, tmp_path)
    release = model.hold(AFTER_THE_APPEND)

    async def kill_during_the_call() -> None:
        await wait_for("the held model call", lambda: bool(model.holding), timeout=150)
        doomed.kill()

    asked_before_kill: list[int] = []

    def answer_the_dead() -> None:
        asked_before_kill.extend(model.turns_asked())
        release.set()  # the held call is answered only now, to a dead connection

    killer = asyncio.create_task(kill_during_the_call())
    try:
        number, run = await run_through_a_kill(
            stack,
            doomed,
            fresh,
            timeout=180,
            before_fresh=answer_the_dead,
            killer=killer,
        )
    finally:
        release.set()
        killer.cancel()
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged"
    # Reported as what it was: a crash, resumed; no tool retry spent.
    [proposal] = activity_results(stack, number, "agent.propose_fix")
    assert (proposal["tool_retries"], proposal["interrupted"]) == (0, 1)
    [comment] = (await github_state(stack, number))["status_comments"]
    assert "Agent tool retries: 0" in comment["body"]
    assert "Agent interrupted by a worker crash: 1 time(s)" in comment["body"]
    assert asked_before_kill == list(range(AFTER_THE_APPEND))
    asked = model.turns_asked()
    assert sorted(asked) == sorted([*range(TURNS), AFTER_THE_APPEND]), asked
    state = await github_state(stack, number)
    assert [p["merged_at"] is not None for p in state["pulls"]] == [True]
    assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")
    assert file_on_branch(stack, "main", "CHANGES.md").count(CHANGELOG_ENTRY) == 1
