"""A small durable workflow that shows the runtime at work (``repairbot example``):
a few activities with heartbeats, a parallel fan-out, a durable timer, and a
signal it waits for with a timeout."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.contracts.example import Item, measure
from app.engine import SignalDefn, WorkflowContext, typed_workflow


class Survey(BaseModel):
    items: list[str]


class GoAhead(BaseModel):
    by: str


class SurveyResult(BaseModel):
    total_length: int
    items: int
    go_ahead: str
    finished_at: str


#: ``repairbot runs signal ID go '{"by": "..."}'`` lets a waiting survey finish early.
GO = SignalDefn[GoAhead]("go")


# Version 2: typed input and result (version 1 took a bare list); example runs
# last seconds, so none of version 1 can still be open.
@typed_workflow("example.survey", version=2, signals=(GO,))
async def survey(ctx: WorkflowContext, input: Survey) -> SurveyResult:
    progress: dict[str, Any] = {"phase": "measuring", "done": 0}
    ctx.set_query("progress", lambda: dict(progress))
    results = await ctx.gather(*[ctx.schedule(measure, Item(item=i)) for i in input.items])
    progress.update(phase="resting", done=len(results))
    await ctx.sleep(0.2)
    progress["phase"] = "waiting for a go-ahead"
    go = await ctx.wait_for(GO, timeout=0.5)
    progress["phase"] = "done"
    return SurveyResult(
        total_length=sum(r.length for r in results),
        items=len(results),
        go_ahead=f"given by {go.by}" if go else "timed out, went ahead anyway",
        finished_at=ctx.now().isoformat(),
    )


WORKFLOWS = [survey]
