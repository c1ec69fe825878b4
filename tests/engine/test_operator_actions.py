"""Operator actions on runs: cancel, terminate and resume, recorded in history
with the reason and who acted, acting only on the run that is active now."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import OPERATOR_RESUME, WorkflowContext
from app.engine._errors import WorkflowCancelled
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime

LOG: list[str] = []


@activity("note")
async def note(actx: ActivityContext, text: str) -> str:
    LOG.append(text)
    return text


@workflow("waits")
async def waits(ctx: WorkflowContext, _: Any) -> Any:
    signal = await ctx.wait_signal("go")
    return signal.payload


@workflow("drifts")
async def drifts(ctx: WorkflowContext, _: Any) -> Any:
    await ctx.activity(note, "first", step="first")
    await ctx.wait_signal("go")
    return await ctx.activity(note, "second", step="second")


@workflow("drifts")
async def drifted(ctx: WorkflowContext, _: Any) -> Any:
    """The same workflow after an incompatible change (no patched() marker)."""
    await ctx.activity(note, "renamed", step="renamed")
    await ctx.wait_signal("go")
    return "never"


@workflow("asks-operator")
async def asks_operator(ctx: WorkflowContext, _: Any) -> Any:
    try:
        resumed = await ctx.wait_for_operator("the branch is in an unknown state")
    except WorkflowCancelled:
        await ctx.activity(note, "cleaned up", step="cleanup")
        return "cleaned"
    return resumed.payload


def registry() -> Registry:
    return Registry.of([waits, drifts, asks_operator], [note])


def setup_function() -> None:
    LOG.clear()


async def _settled(rt: Runtime, key: str, *, activities_done: int = 0) -> None:
    """Until the run's last workflow task has committed (it waits, or parked)
    after ``activities_done`` activities completed (between an activity's
    scheduling and its result no task is pending either)."""
    for _ in range(1000):
        run = rt.store.find_run(key)
        # The dispatcher idle too: a task already claimed (no longer pending) may
        # still be replaying, and would cache its execution after a test clears it.
        if (
            run is not None
            and not run.pending_task
            and len(_events(rt, run.run_id, "activity_completed")) >= activities_done
            and getattr(rt.dispatcher, "idle", True)
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} never settled")


def _events(rt: Runtime, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.load_events(run_id) if e.type == type_]


async def test_cancel_records_reason_and_who(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    started = await rt.start_workflow("waits", "op-cancel")
    await _settled(rt, "op-cancel")
    assert await rt.cancel(started.run_id, "stale request", by="alice")
    run = await rt.wait_for("op-cancel")
    assert run.status == "cancelled"
    assert _events(rt, run.run_id, "cancel_requested") == [
        {"reason": "stale request", "by": "alice"}
    ]
    assert not await rt.cancel(started.run_id, "again", by="alice")  # closed: nothing to do


async def test_an_old_run_id_never_reaches_the_newer_run(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    first = await rt.start_workflow("waits", "op-old")
    await _settled(rt, "op-old")
    await rt.signal("op-old", "go", "done", dedupe_key="d1")
    assert (await rt.wait_for("op-old")).status == "completed"
    second = await rt.start_workflow("waits", "op-old")
    await _settled(rt, second.run_id)
    assert not await rt.cancel(first.run_id, "wrong run", by="alice")
    assert await rt.terminate(first.run_id, "wrong run", by="alice") is None
    assert rt.store.find_run(second.run_id).status == "running"  # type: ignore[union-attr]
    # The workflow id names the active run (existing callers pass it positionally).
    record = await rt.terminate("op-old", "operator stopped it", by="bob")
    assert record is not None and record["by"] == "bob"
    assert _events(rt, second.run_id, "workflow_terminated")[0]["reason"] == "operator stopped it"


async def test_resume_a_blocked_run_after_the_code_is_fixed(make_runtime: Any) -> None:
    reg = registry()
    rt = await make_runtime(reg)
    started = await rt.start_workflow("drifts", "op-drift")
    await _settled(rt, "op-drift", activities_done=1)
    assert LOG == ["first"]
    # An incompatible deploy: the next task replays the history against new code.
    reg.add_workflow(drifted)
    rt.worker.cache.clear()
    await rt.signal("op-drift", "go", None, dedupe_key="go-1")
    blocked = await rt.wait_for("op-drift")
    assert blocked.status == "blocked-nondeterministic"
    # Resumed with the same code, it parks again: nothing is guessed.
    assert await rt.resume(started.run_id, "try again", by="carol")
    for _ in range(1000):
        if len(_events(rt, started.run_id, "run_parked")) == 2:
            break
        await asyncio.sleep(0.01)
    assert rt.store.find_run(started.run_id).status == "blocked-nondeterministic"  # type: ignore[union-attr]
    # The fix (here: the old code back), then resume: the run goes on from its history.
    reg.add_workflow(drifts)
    assert await rt.resume(started.run_id, "reverted the deploy", by="carol")
    run = await rt.wait_for("op-drift", statuses=("completed",))
    assert run.result == "second" and LOG == ["first", "second"]
    resumed = _events(rt, started.run_id, "run_resumed")
    assert [(r["reason"], r["by"], r["from"]) for r in resumed] == [
        ("try again", "carol", "blocked-nondeterministic"),
        ("reverted the deploy", "carol", "blocked-nondeterministic"),
    ]


async def test_a_run_waiting_for_an_operator_is_parked_then_resumed(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    started = await rt.start_workflow("asks-operator", "op-human")
    parked = await rt.wait_for("op-human", statuses=("needs-human",))
    assert parked.error == {
        "type": "WaitingForOperator",
        "message": "the branch is in an unknown state",
    }
    assert not await rt.resume("nonexistent", "x")
    assert await rt.resume(started.run_id, "reset the branch by hand", by="dave")
    run = await rt.wait_for("op-human", statuses=("completed",))
    assert run.result == {
        "reason": "reset the branch by hand",
        "by": "dave",
        "from": "needs-human",
    }
    signals = _events(rt, run.run_id, "signal_received")
    assert [s["name"] for s in signals] == [OPERATOR_RESUME]
    assert not await rt.resume(started.run_id, "twice")  # no longer parked


async def test_cancelling_a_run_waiting_for_an_operator_runs_its_cleanup(
    make_runtime: Any,
) -> None:
    rt = await make_runtime(registry())
    await rt.start_workflow("asks-operator", "op-human-cancel")
    await rt.wait_for("op-human-cancel", statuses=("needs-human",))
    assert await rt.cancel("op-human-cancel", "not worth it", by="erin")
    run = await rt.wait_for("op-human-cancel")
    assert (run.status, run.result, LOG) == ("cancelled", "cleaned", ["cleaned up"])
