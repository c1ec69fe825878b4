"""The example workflow's activity (``repairbot example``): what it takes,
what it answers, and its policy."""

from __future__ import annotations

from pydantic import BaseModel

from app.engine import RetryPolicy, Timeouts, activity_contract


class Item(BaseModel):
    item: str


class Measurement(BaseModel):
    item: str
    length: int


measure = activity_contract(
    "example.measure",
    Item,
    Measurement,
    retry=RetryPolicy(initial_interval=0.2, max_attempts=3),
    timeouts=Timeouts(start_to_close=30, heartbeat=5),
)
