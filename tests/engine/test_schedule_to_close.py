"""The schedule-to-close timeout bounds an activity as a whole, all attempts and
waits included: a running attempt past it is stopped by the reconciler, and a
retry that would start past it is not made."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityError, TransientError
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import Registry, activity, workflow

ATTEMPTS: list[int] = []


@activity(
    "hangs",
    retry=RetryPolicy(max_attempts=5, initial_interval=0.01),
    timeouts=Timeouts(start_to_close=60, schedule_to_close=0.5),
)
async def hangs(actx: ActivityContext, _: Any) -> None:
    """Never finishes on its own (start-to-close is far away)."""
    ATTEMPTS.append(actx.attempt)
    await asyncio.Event().wait()


@activity(
    "flaky",
    retry=RetryPolicy(max_attempts=1000, initial_interval=0.2, backoff=1.0),
    timeouts=Timeouts(start_to_close=60, schedule_to_close=1.0),
)
async def flaky(actx: ActivityContext, _: Any) -> None:
    """Fails transiently every time: only the deadline ends the retries."""
    ATTEMPTS.append(actx.attempt)
    raise TransientError("still down")


@workflow("bounded")
async def bounded(ctx: WorkflowContext, name: str) -> Any:
    defn = hangs if name == "hangs" else flaky
    try:
        await ctx.activity(defn, None, step=name)
    except ActivityError as exc:
        return {"type": exc.error_type, "class": exc.failure_class, "attempts": exc.attempts}
    return None


REGISTRY = Registry.of([bounded], [hangs, flaky])


def setup_function() -> None:
    ATTEMPTS.clear()


async def test_a_running_attempt_past_schedule_to_close_is_timed_out(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("bounded", "stc-running", "hangs")
    run = await rt.wait_for("stc-running", timeout=30)
    assert run.status == "completed", run.error
    assert run.result == {"type": "ScheduleToCloseTimeout", "class": "timeout", "attempts": 1}
    assert ATTEMPTS == [1]  # not retried: the activity as a whole is out of time


async def test_no_retry_starts_past_schedule_to_close(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("bounded", "stc-retries", "flaky")
    run = await rt.wait_for("stc-retries", timeout=30)
    assert run.status == "completed", run.error
    assert run.result["class"] == "transient" and run.result["type"] == "TransientError"
    # 0.2 s between attempts within 1 s: a handful, nowhere near max_attempts.
    assert 1 <= len(ATTEMPTS) < 10 and run.result["attempts"] == len(ATTEMPTS)
