"""The repair run asks here, before its costly phases, whether its
installation may start more work now (app/operations/installation_caps.py)."""

from __future__ import annotations

import asyncio
import time

from app.config import Settings
from app.contracts import installation_caps as caps
from app.contracts.installation_caps import ReleaseResult, SlotAnswer, SlotInput
from app.engine import ActivityContext, Store, implements
from app.operations.installation_caps import release_slot, spent_today, take_slot


class InstallationCapsActivities:
    """``store``: the engine's store (the slots are rows beside the runs)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    @implements(caps.take_installation_slot)
    async def take_installation_slot(self, actx: ActivityContext, asked: SlotInput) -> SlotAnswer:
        store = self.store
        cap_usd = self.settings.max_spend_usd_per_day_per_installation
        if cap_usd > 0:
            spent = await asyncio.to_thread(spent_today, store, asked.installation_id, time.time())
            if spent >= cap_usd:
                await asyncio.to_thread(release_slot, store, actx.run_id)
                return SlotAnswer(
                    granted=False, spend_capped=True, spent_usd=spent, cap_usd=cap_usd
                )
        cap = self.settings.max_active_runs_per_installation
        if cap <= 0:
            return SlotAnswer(granted=True, slot_taken=False)
        taken = await asyncio.to_thread(take_slot, store, asked.installation_id, actx.run_id, cap)
        return SlotAnswer(granted=taken.granted, active=taken.active)

    @implements(caps.release_installation_slot)
    async def release_installation_slot(
        self, actx: ActivityContext, _asked: SlotInput
    ) -> ReleaseResult:
        await asyncio.to_thread(release_slot, self.store, actx.run_id)
        return ReleaseResult()
