"""A small durable workflow that shows the runtime at work (``repairbot example``):
a few activities with heartbeats, a parallel fan-out, a durable timer, and a
signal it waits for with a timeout."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine.activity_context import ActivityContext
from app.engine.context import WorkflowContext
from app.engine.policy import RetryPolicy, Timeouts
from app.engine.registry import activity, workflow


@activity(
    "example.measure",
    retry=RetryPolicy(initial_interval=0.2, max_attempts=3),
    timeouts=Timeouts(start_to_close=30, heartbeat=5),
)
async def measure(actx: ActivityContext, item: str) -> dict[str, Any]:
    """Pretend work: a short wait with a heartbeat, then a deterministic answer."""
    await actx.heartbeat({"item": item, "progress": "started"})
    await asyncio.sleep(0.05)
    return {"item": item, "length": len(item)}


@workflow("example.survey", version=1)
async def survey(ctx: WorkflowContext, items: list[str]) -> dict[str, Any]:
    progress: dict[str, Any] = {"phase": "measuring", "done": 0}
    ctx.set_query("progress", lambda: dict(progress))
    results = await ctx.gather(
        *[ctx.activity(measure, item, step=f"measure-{i}") for i, item in enumerate(items)]
    )
    progress.update(phase="resting", done=len(results))
    await ctx.sleep(0.2)
    progress["phase"] = "waiting for a go-ahead"
    go = await ctx.wait_signal("go", timeout=0.5)
    progress["phase"] = "done"
    return {
        "total_length": sum(r["length"] for r in results),
        "items": len(results),
        "go_ahead": go.payload if go else "timed out, went ahead anyway",
        "finished_at": ctx.now().isoformat(),
    }


WORKFLOWS = [survey]
ACTIVITIES = [measure]
