"""The example workflow's activity (``repairbot example``): its body."""

from __future__ import annotations

import asyncio

from app.contracts import example
from app.contracts.example import Item, Measurement
from app.engine import ActivityContext, implements


class ExampleActivities:
    """Needs nothing; an activity with dependencies takes them here, in
    ``__init__``, and the composition root (app/main) gives them."""

    @implements(example.measure)
    async def measure(self, actx: ActivityContext, input: Item) -> Measurement:
        """Pretend work: a short wait with a heartbeat, then a deterministic answer."""
        await actx.heartbeat({"item": input.item, "progress": "started"})
        await asyncio.sleep(0.05)
        return Measurement(item=input.item, length=len(input.item))
