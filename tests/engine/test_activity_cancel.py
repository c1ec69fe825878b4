"""Cancelling one activity (``ctx.cancel_activity``): a recorded command that
stops that activity, and only it, while the run goes on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from app.engine import _history_commands as ev
from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityCancelled, ActivityError
from app.engine._policy import Timeouts
from app.engine._registry import Registry, activity, workflow
from app.engine._replay import WorkflowExecution, WorkflowTaskResult
from app.engine._runtime import Runtime
from app.engine._store.schema import tasks
from app.workflows.calls import first

LOG: list[str] = []


@activity("slow-work", timeouts=Timeouts(start_to_close=60, heartbeat=5))
async def slow_work(actx: ActivityContext, name: str) -> str:
    LOG.append(f"{name} started")
    for _ in range(1500):  # 30 s unless stopped
        if await actx.heartbeat():
            LOG.append(f"{name} stopped")
            raise ActivityCancelled(f"{name} asked to stop")
        await asyncio.sleep(0.02)
    LOG.append(f"{name} finished")
    return name


@activity("quick-work")
async def quick_work(actx: ActivityContext, name: str) -> str:
    LOG.append(f"{name} ran")
    return name


def _ending(future: Any) -> str:
    if future.error is None:
        return f"finished: {future.result}"
    assert isinstance(future.error, ActivityError)
    return f"{future.error.failure_class}: {future.error.message}"


async def _race(ctx: WorkflowContext, seconds: float) -> tuple[Any, Any, bool]:
    """Start ``slow`` and ``other``; True if the timer fired before ``slow`` ended."""
    slow = ctx.activity(slow_work, "slow", step="slow")
    other = ctx.activity(slow_work, "other", step="other")
    return slow, other, await first(slow, ctx.sleep(seconds)) == 1


@workflow("deadline-stops-one")
async def deadline_stops_one(ctx: WorkflowContext, seconds: float) -> dict[str, Any]:
    """The slow activity is stopped when the timer fires; the other goes on."""
    slow, other, late = await _race(ctx, seconds)
    if late:
        await ctx.cancel_activity(slow)
    return {"slow": _ending(slow), "other": await other}


@workflow("deadline-stops-the-other")
async def deadline_stops_the_other(ctx: WorkflowContext, seconds: float) -> dict[str, Any]:
    """Changed code: it stops the other activity at the same point."""
    slow, other, late = await _race(ctx, seconds)
    if late:
        await ctx.cancel_activity(other)
    return {"slow": await slow, "other": _ending(other)}


@workflow("deadline-sleeps-instead")
async def deadline_sleeps_instead(ctx: WorkflowContext, seconds: float) -> dict[str, Any]:
    """Changed code: it waits longer instead of stopping the activity."""
    slow, other, late = await _race(ctx, seconds)
    if late:
        await ctx.sleep(seconds)
    return {"slow": await slow, "other": await other}


@workflow("cancel-before-start")
async def cancel_before_start(ctx: WorkflowContext, _: Any) -> dict[str, Any]:
    queued = ctx.activity(quick_work, "queued", step="queued")
    await ctx.cancel_activity(queued)
    done = await ctx.activity(quick_work, "after", step="after")
    # Cancelling what already ended asks nothing of anyone.
    await ctx.cancel_activity(queued)
    return {"queued": _ending(queued), "after": done}


REGISTRY = Registry.of(
    [deadline_stops_one, deadline_stops_the_other, deadline_sleeps_instead, cancel_before_start],
    [slow_work, quick_work],
)


def setup_function() -> None:
    LOG.clear()


async def _stop_other_when_slow_stopped() -> None:
    """``other`` must outlive the cancel of ``slow``; end it quickly after."""
    for _ in range(1500):
        if "slow stopped" in LOG:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"slow never stopped: {LOG}")


def _task_rows(rt: Runtime, run_id: str) -> dict[str, Any]:
    """The run's activity task rows by step, as the database holds them."""
    with rt.store.engine.connect() as conn:
        rows = conn.execute(select(tasks).where(tasks.c.run_id == run_id)).all()
    return {row.operation_id.rsplit(":", 1)[-1]: row for row in rows}


async def test_the_cancelled_activity_stops_and_the_other_runs_on(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("deadline-stops-one", "one", 0.5)
    await _stop_other_when_slow_stopped()
    # ``other`` is still working when ``slow`` has stopped: only one was told.
    assert "other stopped" not in LOG and "other finished" not in LOG
    await rt.cancel("one", "test over")  # ends ``other`` now (it would take 30 s)
    run = await rt.wait_for("one", timeout=30)
    history = rt.store.load_events(run.run_id)
    [request] = [e for e in history if e.type == ev.ACTIVITY_CANCEL_REQUESTED]
    scheduled = {e.data["operation_id"]: e for e in history if e.type == ev.ACTIVITY_SCHEDULED}
    slow_cmd = scheduled[f"{run.run_id}:slow"].data["cmd"]
    assert request.data["target"] == slow_cmd and request.data["activity"] == "slow-work"
    # The slow activity's end is in history after the request: stopped, not finished.
    [slow_end] = [e for e in history if e.data.get("cmd") == slow_cmd and e.seq > request.seq]
    assert slow_end.type == ev.ACTIVITY_FAILED
    assert slow_end.data["failure_class"] == "cancelled"
    rows = _task_rows(rt, run.run_id)
    assert rows["slow"].status == "cancelled"


async def test_the_stop_is_recorded_and_replays(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("deadline-stops-one", "two", 0.3)
    await _stop_other_when_slow_stopped()
    await rt.cancel("two", "test over")
    run = await rt.wait_for("two", timeout=30)
    history = rt.store.load_events(run.run_id)
    step = _replay("deadline-stops-one", history[:-1], run.run_id)
    assert step.outcome is not None and step.outcome.status == "cancelled"
    assert [c.type for c in step.commands] == []
    # The request is compared like any command: changed code does not match it.
    for changed in ("deadline-stops-the-other", "deadline-sleeps-instead"):
        step = _replay(changed, history[:-1], run.run_id)
        assert step.outcome is not None
        assert step.outcome.status == "blocked-nondeterministic", changed
        assert ev.ACTIVITY_CANCEL_REQUESTED in str(step.outcome.error), step.outcome.error


def _replay(name: str, history: list[ev.RecordedEvent], run_id: str) -> WorkflowTaskResult:
    """Replay ``history`` (of run ``run_id``, workflow id ``two``) on workflow ``name``."""
    execution = WorkflowExecution(REGISTRY.workflow(name, 1), run_id=run_id, workflow_id="two")
    return execution.apply(history, task_time=datetime.now(UTC))


async def test_a_queued_activity_never_starts(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("cancel-before-start", "three", None)
    run = await rt.wait_for("three", timeout=30)
    assert run.status == "completed", run.error
    assert run.result == {
        "queued": "cancelled: cancelled before it started",
        "after": "after",
    }
    assert LOG == ["after ran"]
    history = rt.store.load_events(run.run_id)
    # One request: the second cancel_activity found the activity already ended.
    assert [e.type for e in history].count(ev.ACTIVITY_CANCEL_REQUESTED) == 1
    rows = _task_rows(rt, run.run_id)
    assert rows["queued"].status == "cancelled" and rows["queued"].attempt == 0
