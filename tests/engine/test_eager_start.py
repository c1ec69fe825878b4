"""A workflow task's commit claims the activity it schedules for the worker
that runs the task, which runs it in the task's own slot (no job, no claim
transaction, no hop through the channel), as a fused step does for the next
activity. In-process dispatch on the real database; the crash case is in
test_crash_fused.py."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import OperationalError

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._store.statements import TASK_BY_OPERATION
from tests.waiting import wait_until

ran: list[str] = []


@activity("eager-echo")
async def echo(actx: ActivityContext, value: int) -> int:
    ran.append(actx.operation_id)
    return value


@workflow("eager-one")
async def one(ctx: WorkflowContext, value: int) -> int:
    result: int = await ctx.activity(echo, value, step="only")
    return result


@workflow("eager-two")
async def two(ctx: WorkflowContext, value: int) -> int:
    first: int = await ctx.activity(echo, value, step="first")
    second: int = await ctx.activity(echo, first + 1, step="second")
    return second


REGISTRY = Registry.of([one, two], [echo])


def _lose_first_answer(rt: Runtime, method: str) -> list[bool]:
    """Make the store's ``method`` commit and then, the first time, raise as if
    the connection broke after COMMIT; the list records that it did."""
    original = getattr(rt.store, method)
    broke: list[bool] = []

    def commit_then_lose_the_answer(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        if not broke:
            broke.append(True)
            raise OperationalError("COMMIT", {}, ConnectionError("server closed the connection"))
        return done

    setattr(rt.store, method, commit_then_lose_the_answer)
    return broke


async def _run_losing_one_answer(
    rt: Runtime, method: str, workflow_name: str, value: int, *, result: int
) -> str:
    """Run ``workflow_name`` to completion with ``result`` while the first
    answer of the store's ``method`` is lost; its run id."""
    ran.clear()
    broke = _lose_first_answer(rt, method)
    started = await rt.start_workflow(workflow_name, f"{workflow_name}-lost", value)
    run = await rt.wait_for(f"{workflow_name}-lost")
    assert (run.status, run.result) == ("completed", result)
    assert broke == [True]
    return started.run_id


def _attempts(rt: Runtime, run_id: str) -> list[tuple[int, int, str]]:
    return [
        (a["attempt"], a["fencing_token"], str(a["outcome"]).split("; ")[0])
        for a in rt.store.activity_attempts(run_id)
    ]


async def test_the_first_activity_is_claimed_in_the_task_commit(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    run_id = (await rt.start_workflow("eager-one", "eager-1", 7)).run_id
    run = await rt.wait_for("eager-1")
    assert (run.status, run.result) == ("completed", 7)
    with rt.store.engine.connect() as conn:
        task = conn.execute(TASK_BY_OPERATION, {"p_operation": f"{run_id}:only"}).one()
    # Claimed in the commit that scheduled it: no claim transaction came later.
    assert task.started_at == task.scheduled_at
    assert _attempts(rt, run_id) == [(1, 1, "completed")]
    # The close is visible (it commits on a store thread) before the worker's
    # coroutine goes on to count how the result was recorded.
    counts = rt.worker.counts
    await wait_until("the result counted", lambda: counts.fused + counts.unfused)
    assert counts.fused == 1  # and its result went on fused


async def test_a_lost_commit_outcome_releases_the_claim_it_made(make_runtime: Any) -> None:
    """The commit went through but its answer was lost (the connection broke
    after COMMIT): the attempt it claimed for this worker is released at once
    rather than left running in our name until its lease, and the retry runs
    the activity; its body ran once."""
    rt = await make_runtime(REGISTRY)
    run_id = await _run_losing_one_answer(rt, "commit_workflow_task", "eager-one", 3, result=3)
    assert _attempts(rt, run_id) == [(1, 1, "failed:transient"), (2, 2, "completed")]
    attempts = rt.store.activity_attempts(run_id)
    assert "ClaimUnconfirmed" in str(attempts[0]["error"])
    assert ran == [f"{run_id}:only"]


async def test_a_lost_fused_commit_outcome_releases_the_claim_it_made(make_runtime: Any) -> None:
    """The same for a fused step: the completion of ``first`` committed with
    the claim of ``second``, its answer lost. ``first`` is not completed
    twice, ``second``'s claimed attempt is released and retried, and each
    body ran once."""
    rt = await make_runtime(REGISTRY)
    run_id = await _run_losing_one_answer(rt, "complete_and_continue", "eager-two", 1, result=2)
    assert _attempts(rt, run_id) == [
        (1, 1, "completed"),
        (1, 1, "failed:transient"),
        (2, 2, "completed"),
    ]
    assert ran == [f"{run_id}:first", f"{run_id}:second"]
