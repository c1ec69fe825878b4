"""The repair run asks here, before its costly phases, whether its
installation may start more work now (app/operations/installation_caps.py)."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict

from app.config import Settings
from app.engine import (
    ActivityContext,
    ActivityDefn,
    RetryPolicy,
    Runtime,
    Timeouts,
    typed_activity,
)
from app.operations.installation_caps import release_slot, spent_today, take_slot

DB = RetryPolicy(initial_interval=0.5, max_attempts=10)
DB_TIMEOUTS = Timeouts(start_to_close=60)


class SlotInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    installation_id: int


class SlotAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    granted: bool
    #: Runs of the installation doing costly work now.
    active: int = 0
    #: The day's model spend reached its cap: the run must not start work.
    spend_capped: bool = False
    spent_usd: float = 0.0
    cap_usd: float = 0.0


class ReleaseResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    released: bool = True


@typed_activity("caps.take_slot", retry=DB, timeouts=DB_TIMEOUTS)
async def take_installation_slot(actx: ActivityContext, asked: SlotInput) -> SlotAnswer:
    settings = actx.dep(Settings)
    store = actx.dep(Runtime).store
    cap_usd = settings.max_spend_usd_per_day_per_installation
    if cap_usd > 0:
        spent = await asyncio.to_thread(spent_today, store, asked.installation_id, time.time())
        if spent >= cap_usd:
            await asyncio.to_thread(release_slot, store, actx.run_id)
            answer = SlotAnswer(granted=False, spend_capped=True, spent_usd=spent, cap_usd=cap_usd)
            return answer
    cap = settings.max_active_runs_per_installation
    if cap <= 0:
        return SlotAnswer(granted=True)
    taken = await asyncio.to_thread(take_slot, store, asked.installation_id, actx.run_id, cap)
    return SlotAnswer(granted=taken.granted, active=taken.active)


@typed_activity("caps.release_slot", retry=DB, timeouts=DB_TIMEOUTS)
async def release_installation_slot(actx: ActivityContext, _asked: SlotInput) -> ReleaseResult:
    await asyncio.to_thread(release_slot, actx.dep(Runtime).store, actx.run_id)
    return ReleaseResult()


ACTIVITIES: list[ActivityDefn] = [take_installation_slot, release_installation_slot]
