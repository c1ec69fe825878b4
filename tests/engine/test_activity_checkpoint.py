"""An activity's checkpoint (saved through a heartbeat) reaches its next
attempt, and progress heartbeats never erase it."""

from __future__ import annotations

from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import TransientError
from app.engine._policy import RetryPolicy
from app.engine._registry import Registry, activity, workflow

SEEN: list[Any] = []


@activity("resumable", retry=RetryPolicy(initial_interval=0.01, max_attempts=4))
async def resumable(actx: ActivityContext, steps: int) -> dict[str, Any]:
    SEEN.append(actx.last_checkpoint)
    done = actx.last_checkpoint["done"] if actx.last_checkpoint else 0
    while done < steps:
        done += 1
        await actx.checkpoint({"done": done})
        await actx.heartbeat({"doing": "a progress beat"})
        if done == 2 and actx.attempt == 1:
            raise TransientError("the first attempt dies after step 2")
    return {"done": done, "attempt": actx.attempt}


@workflow("checkpointed")
async def checkpointed(ctx: WorkflowContext, steps: int) -> Any:
    return await ctx.activity(resumable, steps, step="resumable")


REGISTRY = Registry.of([checkpointed], [resumable])


async def test_the_next_attempt_receives_the_last_checkpoint(make_runtime: Any) -> None:
    SEEN.clear()
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("checkpointed", "ckpt-1", 4)
    run = await rt.wait_for("ckpt-1")
    assert (run.status, run.result) == ("completed", {"done": 4, "attempt": 2})
    # The retry resumed after step 2, though a progress beat came after it.
    assert SEEN == [None, {"done": 2}]
