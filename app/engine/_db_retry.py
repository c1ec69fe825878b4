"""Riding out database blips inside the worker.

A PostgreSQL restart or failover makes every statement fail for a few
seconds. Without retries, a worker that had finished an activity dropped its
result and left the attempt ``running`` until the attempt's own timeout
(minutes, for git or agent steps), while its liveness beats said it was fine.
Here every store call the worker makes on the hot path (claim, heartbeat,
result, workflow-task commit, timer firing) is retried with capped
exponential backoff while the error is a connection-level one; other errors
(a constraint, a bug) surface at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.engine._store.async_store import StoreThreads

log = logging.getLogger("repairbot.engine")

T = TypeVar("T")

FIRST_DELAY = 0.05
MAX_DELAY = 2.0


def is_transient(exc: BaseException) -> bool:
    """A lost or refused connection, a restart in progress: worth retrying."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


async def retrying(
    call: Callable[[], T], *, what: str, patience: float, threads: StoreThreads
) -> T:
    """``call()`` on the store's threads (never on the event loop), retried on
    transient database errors for up to ``patience`` seconds; the last error
    is raised when patience runs out."""
    deadline = time.monotonic() + patience
    delay = FIRST_DELAY
    while True:
        try:
            return await threads.run(call)
        except DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            log.warning(
                "database unavailable while %s (%s); retrying in %.2fs",
                what,
                type(exc.orig).__name__ if exc.orig is not None else type(exc).__name__,
                delay,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
