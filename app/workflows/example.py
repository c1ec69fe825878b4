"""A small durable workflow that shows the runtime at work (``repairbot example``):
a few activities with heartbeats, a parallel fan-out, a durable timer, and a
signal it waits for with a timeout."""

from __future__ import annotations

from typing import Any

from activities.example import measure
from app.engine import WorkflowContext, workflow


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
