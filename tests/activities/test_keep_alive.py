"""``keep_alive``: the heartbeat around an activity's long awaits that do not
heartbeat by themselves (the agent as a whole, a workspace fetch, an API
call). Recovery test 12's outer guard: a cancel asked while the work is in
hand stops it, whatever the work is doing inside."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from activities._support import keep_alive
from app.engine._errors import ActivityCancelled
from tests.activities.support import RecordingContext


async def test_a_cancel_stops_work_that_never_heartbeats_itself(actx: RecordingContext) -> None:
    """The work waits for ever and says nothing; the second heartbeat answers
    "cancel": the work is cancelled and the activity stops with it."""
    ended: list[str] = []

    async def silent_work() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        return "never"

    actx.cancel_when = lambda beats: len(beats) >= 2
    with pytest.raises(ActivityCancelled, match="while fetching"):
        guarded = keep_alive(actx, silent_work(), doing="fetching", every=0.05)  # type: ignore[arg-type]
        await asyncio.wait_for(guarded, timeout=30)
    assert ended == ["cancelled"]
    assert actx.heartbeats == [{"doing": "fetching"}] * 2


async def test_work_that_ends_is_answered_without_a_cancel(actx: RecordingContext) -> None:
    async def quick() -> Any:
        await asyncio.sleep(0.2)  # a few heartbeat intervals (0.05 s here)
        return {"done": True}

    assert await keep_alive(actx, quick(), doing="quick", every=0.05) == {"done": True}  # type: ignore[arg-type]
    assert actx.heartbeats and set(map(str, actx.heartbeats)) == {str({"doing": "quick"})}
