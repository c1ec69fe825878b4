"""A suspended installation parks the run (app/workflows/calls.py): the
activity stops at its first 403 instead of burning its retries, the run waits
on a durable signal holding no worker, and ``installation_resumed`` (sent on
``installation.unsuspend``) makes it call again and go on."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from sqlalchemy import select

from app.contracts.triage_inputs import INSTALLATION_RESUMED
from app.engine import (
    ActivityContext,
    PermanentError,
    Registry,
    RetryPolicy,
    WorkflowContext,
    typed_activity,
    workflow,
)
from app.engine._store.schema import tasks
from app.github.errors import SUSPENDED, InstallationSuspended
from app.workflows.calls import call
from tests.e2e.scenario import wait_for

WORLD: dict[str, Any] = {}


class Ask(BaseModel):
    what: str


class Answer(BaseModel):
    said: str


@typed_activity("suspendable", retry=RetryPolicy(initial_interval=0.01, max_attempts=5))
async def suspendable(actx: ActivityContext, ask: Ask) -> Answer:
    WORLD.setdefault("attempts", []).append(actx.attempt)
    failure = WORLD.get("failure")
    if failure is not None:
        raise failure
    return Answer(said=ask.what)


@workflow("suspendable-flow")
async def suspendable_flow(ctx: WorkflowContext, _: Any) -> Any:
    answer = await call(ctx, suspendable, Ask(what="hello"), step="ask")
    return answer.said


def _idle(rt: Any, run_id: str) -> bool:
    """Nothing of the run is scheduled or running, and its call has failed."""
    with rt.store.engine.connect() as conn:
        busy = conn.execute(
            select(tasks.c.id).where(
                tasks.c.run_id == run_id, tasks.c.status.in_(("scheduled", "running"))
            )
        ).first()
    failed = [e for e in rt.store.load_events(run_id) if e.type == "activity_failed"]
    return busy is None and bool(failed)


async def test_the_run_waits_for_the_unsuspend_then_calls_again(make_runtime: Any) -> None:
    WORLD.clear()
    WORLD["failure"] = InstallationSuspended(f"POST /repos/o/r/issues/1/comments: {SUSPENDED}")
    rt = await make_runtime(Registry.of([suspendable_flow], [suspendable]))
    started = await rt.start_workflow("suspendable-flow", "suspended-1")
    await wait_for("the call failed and nothing runs", lambda: _idle(rt, started.run_id))
    # One attempt, no retries; the run is open, waiting.
    assert WORLD["attempts"] == [1]
    assert rt.store.load_run(started.run_id).status == "running"
    WORLD.pop("failure")
    await rt.signal("suspended-1", INSTALLATION_RESUMED, {}, dedupe_key="unsuspend-1")
    run = await rt.wait_for("suspended-1", timeout=30)
    assert run.status == "completed" and run.result == "hello"
    assert WORLD["attempts"] == [1, 1]  # called again as a new activity


async def test_another_permanent_failure_still_ends_the_call(make_runtime: Any) -> None:
    WORLD.clear()
    WORLD["failure"] = PermanentError("GitHub answered 403 to POST /x: Resource not accessible")
    rt = await make_runtime(Registry.of([suspendable_flow], [suspendable]))
    await rt.start_workflow("suspendable-flow", "forbidden-1")
    run = await rt.wait_for("forbidden-1", timeout=30)
    assert run.status == "failed"
    assert WORLD["attempts"] == [1]
