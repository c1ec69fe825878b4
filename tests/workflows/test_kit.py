"""The kit itself: the clock the test turns, fakes, waiting, the replayer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.engine._errors import TransientError
from app.engine._jobs import WORKFLOW_TASK, Job
from app.engine.testing import FakeActivities, Replayer, RunStuck, WorkflowEnvironment
from app.engine.testing.clock import DEFAULT_START, ManualClock
from app.engine.testing.dispatcher import StepDispatcher
from tests.workflows import kit_workflows
from tests.workflows.kit_workflows import REGISTRY

HISTORIES = Path(__file__).parent.parent / "histories"


async def test_a_day_long_timer_fires_when_the_clock_is_advanced(kit_db_url: str) -> None:
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-1", 24)
        await env.wait_phase("r-1", "waiting")
        await env.advance(24 * 3600 - 1)
        assert (await env.run("r-1")).status == "running"  # one second early: still waiting
        await env.advance(1)
        await env.advance(60)  # the run's own minute of sleep after the expiry
        run = await env.wait_status("r-1")
    assert run.status == "completed"
    assert run.result == {"outcome": "expired", "at": "2027-01-16T08:01:00+00:00"}
    assert env.clock() == DEFAULT_START + 24 * 3600 + 60
    assert fakes.calls == []


async def test_a_signal_reaches_the_run_and_the_fake_records_its_input(kit_db_url: str) -> None:
    fakes = FakeActivities().on("kit.greet", lambda call: f"hello {call.input}")
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-2", 1)
        await env.signal("r-2", "approve", "maya")
        run = await env.wait_status("r-2")
    assert run.result == {"outcome": "approved", "greeting": "hello maya"}
    assert fakes.inputs("kit.greet") == ["maya"]
    assert fakes.operations() == ["greet"]


async def test_retries_wait_for_the_clock_with_the_real_backoff(kit_db_url: str) -> None:
    fakes = FakeActivities().sequence("kit.flaky", TransientError("down"), "up")
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-retrying", "r-3")
        await env.wait_called("kit.flaky")
        await env.settle()
        assert len(fakes.calls_to("kit.flaky")) == 1  # the retry waits for its back-off
        await env.advance(59)
        assert len(fakes.calls_to("kit.flaky")) == 1
        await env.advance(1)
        run = await env.wait_status("r-3")
    assert run.result == {"value": "up"}
    assert [c.attempt for c in fakes.calls_to("kit.flaky")] == [1, 2]


async def test_waiting_for_what_cannot_happen_says_why(kit_db_url: str) -> None:
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-4", 1)
        with pytest.raises(RunStuck, match=r"next held job due in 3600\.0s"):
            await env.wait_status("r-4")


async def test_an_activity_without_a_fake_fails_and_is_listed(kit_db_url: str) -> None:
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-5", 1)
        await env.signal("r-5", "approve", "maya")
        run = await env.wait_status("r-5")
    assert run.status == "failed"
    assert [c.activity for c in fakes.unexpected] == ["kit.greet"]


async def test_the_kit_runs_on_a_fresh_sqlite_file_without_a_database_url() -> None:
    fakes = FakeActivities().on("kit.greet", "hi")
    async with WorkflowEnvironment.start(REGISTRY, fakes) as env:
        await env.start_workflow("kit-reminder", "r-6", 1)
        await env.signal("r-6", "approve", "maya")
        assert (await env.wait_status("r-6")).result == {"outcome": "approved", "greeting": "hi"}


async def test_an_exported_history_replays_and_a_changed_workflow_is_reported(
    kit_db_url: str,
) -> None:
    fakes = FakeActivities().on("kit.greet", "hi")
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-7", 1)
        await env.signal("r-7", "approve", "maya")
        await env.wait_status("r-7")
        history = await env.export("r-7")
    replayer = Replayer(REGISTRY)
    assert replayer.replay(history) is None
    divergence = replayer.replay(history, defn=kit_workflows.retrying)
    assert divergence is not None
    assert divergence.command == 1
    text = str(divergence)
    assert "kit-reminder@1" in text and "ctx.patched" in text
    assert "'activity': 'kit.flaky'" in text


def test_the_replayer_names_the_file_and_the_recorded_step() -> None:
    from app.main.catalog import build_registry
    from tests.engine import replay_workflows

    registry = build_registry()
    for defn in replay_workflows.REGISTRY.workflows.values():
        registry.add_workflow(defn)
    path = HISTORIES / "greet_v1_before_audit.json"
    replayer = Replayer(registry)
    assert replayer.replay(path) is None
    with pytest.raises(AssertionError) as caught:
        replayer.check(path, defn=replay_workflows.greet_changed_unsafely)
    message = str(caught.value)
    assert message.startswith("greet_v1_before_audit.json: greet@1")
    recorded = json.loads(path.read_text())["events"]
    first_command = next(e for e in recorded if e["type"] == "activity_scheduled")
    assert f"history event {first_command['seq']}" in message


async def test_advance_right_after_a_start_counts_timers_from_the_start(kit_db_url: str) -> None:
    """``advance`` first finishes what is due now: the run's first task, not
    yet run when ``start_workflow`` returns, starts its timer at the start."""
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-8", 1)
        await env.advance(3600)
        await env.advance(60)
        run = await env.wait_status("r-8")
    assert run.result == {"outcome": "expired", "at": "2027-01-15T09:01:00+00:00"}


async def test_a_job_sent_again_while_it_runs_runs_once_more() -> None:
    """What a running job loaded may predate the change that sent it again
    (a signal during a workflow task): the copy must not be dropped."""
    started, gate, runs = asyncio.Event(), asyncio.Event(), []

    async def run_job(job: Job) -> None:
        runs.append(job.job_id)
        started.set()
        await gate.wait()

    clock = ManualClock()
    dispatcher = StepDispatcher(run_job, clock)
    job = Job("wf:r-9", WORKFLOW_TASK, "r-9/1", "q")
    await dispatcher.enqueue([job])
    await started.wait()
    await dispatcher.enqueue([job])
    gate.set()
    while dispatcher.busy:
        await dispatcher.next_finished()
    assert runs == ["wf:r-9", "wf:r-9"]


async def test_the_workflow_deadline_falls_due_on_the_kits_clock(kit_db_url: str) -> None:
    """Deadlines are the reconciler's: it reads the injected clock too."""
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-10", 24, deadline_seconds=7200)
        await env.advance(7200)  # a deadline is passed once the clock is beyond it
        assert (await env.run("r-10")).status == "running"
        await env.advance(1)
        run = await env.wait_status("r-10")
    assert run.status == "timed-out", (run.status, run.error)


async def test_signals_without_a_dedupe_key_are_each_delivered(kit_db_url: str) -> None:
    fakes = FakeActivities()
    async with WorkflowEnvironment.start(REGISTRY, fakes, database_url=kit_db_url) as env:
        await env.start_workflow("kit-reminder", "r-11", 1)
        assert await env.signal("r-11", "approve", "maya")
        assert await env.signal("r-11", "approve", "maya")
        history = await env.history("r-11")
    assert [e.type for e in history].count("signal_received") == 2
