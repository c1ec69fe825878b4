"""The example workflow's activity (``repairbot example``)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.engine import ActivityContext, RetryPolicy, Timeouts, activity


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


ACTIVITIES = [measure]
