"""What every activity family here needs: heartbeats around long awaits,
and evidence reads.

Failures keep their class: a malformed input or unusable evidence is
permanent (no retry can fix it), cancellation stops the work in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from pydantic import BaseModel

from app.engine import ActivityCancelled, ActivityContext, PermanentError
from app.evidence import EvidenceError, EvidenceRef, EvidenceStore

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def read_evidence(store: EvidenceStore, ref: EvidenceRef) -> bytes:
    """The artifact's bytes; missing or altered evidence never heals, so it is permanent."""
    try:
        return store.get(ref.sha256)
    except EvidenceError as exc:
        raise PermanentError(f"evidence {ref.name} ({ref.kind}) cannot be used: {exc}") from None


async def keep_alive(actx: ActivityContext, work: Awaitable[T], *, doing: str, every: float) -> T:
    """Await ``work`` while heartbeating; stop it if cancellation is requested.

    For steps that are not repository commands (git fetches, API calls);
    :func:`app.sandbox.runner.run_command` heartbeats by itself.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            if await actx.heartbeat({"doing": doing}):
                raise ActivityCancelled(f"cancellation requested while {doing}")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
