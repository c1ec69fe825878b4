"""The example workflow's activity (``repairbot example``)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from app.engine import ActivityContext, ActivityDefn, RetryPolicy, Timeouts, typed_activity


class Item(BaseModel):
    item: str


class Measurement(BaseModel):
    item: str
    length: int


@typed_activity(
    "example.measure",
    retry=RetryPolicy(initial_interval=0.2, max_attempts=3),
    timeouts=Timeouts(start_to_close=30, heartbeat=5),
)
async def measure(actx: ActivityContext, input: Item) -> Measurement:
    """Pretend work: a short wait with a heartbeat, then a deterministic answer."""
    await actx.heartbeat({"item": input.item, "progress": "started"})
    await asyncio.sleep(0.05)
    return Measurement(item=input.item, length=len(input.item))


ACTIVITIES: list[ActivityDefn] = [measure]
