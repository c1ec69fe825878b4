"""Cancellation is a state model the workflow takes part in; termination is not."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import (
    ActivityCancelled,
    ActivityError,
    CleanupIncomplete,
    WorkflowCancelled,
)
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import Registry, activity, workflow
from app.engine._replay import WorkflowExecution
from tests.waiting import history_has, wait_until

LOG: list[str] = []


@activity("long-work", timeouts=Timeouts(start_to_close=30, heartbeat=5))
async def long_work(actx: ActivityContext, _: Any) -> str:
    LOG.append("work started")
    for _ in range(300):
        if await actx.heartbeat({"progress": "working"}):
            LOG.append("work stopped on request")
            raise ActivityCancelled("asked to stop")
        await asyncio.sleep(0.02)
    return "finished"


@activity("save-evidence")
async def save_evidence(actx: ActivityContext, _: Any) -> str:
    LOG.append("evidence saved")
    return "evidence-sha"


@activity("clean", retry=RetryPolicy(initial_interval=0.01, max_attempts=2))
async def clean(actx: ActivityContext, fail: bool) -> None:
    LOG.append("cleaning")
    if fail:
        raise RuntimeError("branch deletion refused")


@workflow("cancellable")
async def cancellable(ctx: WorkflowContext, fail_cleanup: bool) -> Any:
    work = ctx.activity(long_work, None, step="work")
    try:
        return await work
    except WorkflowCancelled:
        await ctx.stop_active_work()
        ctx.enter_cancel_phase("preserving-evidence")
        evidence = await ctx.activity(save_evidence, None, step="evidence")
        ctx.enter_cancel_phase("cleaning-owned-resources")
        try:
            await ctx.activity(clean, fail_cleanup, step="clean")
        except ActivityError as exc:
            raise CleanupIncomplete(exc.message, leftovers=["branch repairbot/1"]) from exc
        return {"cancelled": True, "evidence": evidence}


@activity("close-pr")
async def close_pr(actx: ActivityContext, _: Any) -> str:
    LOG.append("pr closed")
    return "closed"


@activity("delete-branch")
async def delete_branch(actx: ActivityContext, _: Any) -> str:
    LOG.append("branch deleted")
    return "deleted"


@workflow("waits-then-cleans")
async def waits_then_cleans(ctx: WorkflowContext, _: Any) -> Any:
    """Nothing in flight when cancelled: the cleanup is scheduled in the very
    workflow task that records the cancel."""
    try:
        await ctx.wait_signal("review")
        return "reviewed"
    except WorkflowCancelled:
        await ctx.stop_active_work()
        ctx.enter_cancel_phase("cleaning-owned-resources")
        closed, deleted = await ctx.gather(
            ctx.activity(close_pr, None, step="close-pr"),
            ctx.activity(delete_branch, None, step="delete-branch"),
        )
        return {"pr": closed, "branch": deleted}


@workflow("ignores-cancel")
async def ignores_cancel(ctx: WorkflowContext, _: Any) -> Any:
    await ctx.sleep(3600)


REGISTRY = Registry.of(
    [cancellable, ignores_cancel, waits_then_cleans],
    [long_work, save_evidence, clean, close_pr, delete_branch],
)


def setup_function() -> None:
    LOG.clear()


async def _wait_for_log(entry: str) -> None:
    for _ in range(500):
        if entry in LOG:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{entry!r} never logged: {LOG}")


async def test_cancel_walks_the_phases_to_cancelled(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("cancellable", "c-ok", False)
    await _wait_for_log("work started")
    assert await rt.cancel("c-ok", "maintainer said /repair cancel")
    run = await rt.wait_for("c-ok")
    assert run.status == "cancelled"
    assert run.result == {"cancelled": True, "evidence": "evidence-sha"}
    assert LOG == ["work started", "work stopped on request", "evidence saved", "cleaning"]
    phases = [
        e.data["id"]
        for e in rt.store.load_events(run.run_id)
        if e.type == "marker_recorded" and e.data["kind"] == "cancel_phase"
    ]
    assert phases == ["stopping-active-work", "preserving-evidence", "cleaning-owned-resources"]


async def test_cleanup_that_cannot_finish_is_reported(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("cancellable", "c-bad", True)
    await _wait_for_log("work started")
    await rt.cancel("c-bad", "issue closed")
    run = await rt.wait_for("c-bad", timeout=30)
    assert run.status == "cleanup-incomplete"
    assert run.error["leftovers"] == ["branch repairbot/1"]


async def test_cleanup_scheduled_in_the_cancelling_task_runs(make_runtime: Any) -> None:
    """Regression (issue 9): the commit that records a cancel used to cancel the
    cleanup activities the workflow scheduled in that same commit."""
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("waits-then-cleans", "c-wait", None)
    await rt.wait_for("c-wait", statuses=("running",))
    for _ in range(500):  # the first workflow task has committed its wait
        started = rt.store.find_run("c-wait")
        if started is not None and not started.pending_task:
            break
        await asyncio.sleep(0.01)
    assert await rt.cancel("c-wait", "maintainer said /repair cancel")
    run = await rt.wait_for("c-wait")
    assert run.status == "cancelled", run.error
    assert run.result == {"pr": "closed", "branch": "deleted"}
    assert sorted(LOG) == ["branch deleted", "pr closed"]
    history = rt.store.load_events(run.run_id)
    assert [e for e in history if e.type == "activity_failed"] == []
    # A worker that lost its cache replays the cancel at the same point, so the
    # cleanup (scheduled after the boundary) is never stopped by the replay either.
    cancel_at = next(e.seq for e in history if e.type == "cancel_requested")
    execution = WorkflowExecution(
        REGISTRY.workflow("waits-then-cleans", 1), run_id=run.run_id, workflow_id="c-wait"
    )
    step = execution.apply(history[:-1], task_time=datetime.now(UTC))
    assert step.cancel_delivered
    cleanup_cmds = [e.data["cmd"] for e in history if e.type == "activity_scheduled"]
    assert len(cleanup_cmds) == 2
    assert all(cmd > step.cancel_boundary for cmd in cleanup_cmds)
    assert all(e.seq > cancel_at for e in history if e.type == "activity_scheduled")


async def test_unhandled_cancel_ends_the_run_cancelled(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("ignores-cancel", "c-plain")
    await wait_until("the run sleeps", history_has(rt, "c-plain", "timer_started"))
    await rt.cancel("c-plain", "label removed")
    run = await rt.wait_for("c-plain")
    assert run.status == "cancelled"
    assert run.error["message"] == "label removed"


async def test_terminate_records_what_was_left_uncertain(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("cancellable", "t-1", False)
    await _wait_for_log("work started")
    record = await rt.terminate("t-1", "operator stopped it")
    assert record is not None
    assert record["uncertain"][0]["operation_id"] == "t-1/1:work"
    assert record["uncertain"][0]["effect"] == "unknown"
    run = await rt.wait_for("t-1")
    assert run.status == "terminated"
    assert rt.store.load_events(run.run_id)[-1].type == "workflow_terminated"
