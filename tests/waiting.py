"""Waiting in tests on recorded state, never on time.

A test that sleeps "long enough" for something to happen is slow when the
machine is idle and flaky when it is loaded. These helpers poll a condition
(a database row, a history event, a counter) until it holds and fail with
what was last seen. The poll interval is not synchronisation: the condition
is. For the workflow test kit, ``app.engine.testing`` waits on the runtime's
own progress instead (no polling at all).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: How often a condition is looked at again. Short: each look is a cheap read.
POLL = 0.01


async def _value(check: Callable[[], Any]) -> Any:
    value = check()
    if inspect.isawaitable(value):
        value = await value
    return value


async def wait_until(
    what: str,
    check: Callable[[], T | None] | Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30.0,
) -> T:
    """Until ``check()`` (sync or async) returns something truthy; returns it.
    ``what`` names the condition in the failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = await _value(check)
        if value:
            return value  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last seen: {value!r})")
        await asyncio.sleep(POLL)


async def eventually(assertion: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    """Until ``assertion()`` (sync or async) stops raising ``AssertionError``;
    returns its value, or re-raises its last failure after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await _value(assertion)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(POLL)


def wait_until_sync(what: str, check: Callable[[], T | None], *, timeout: float = 30.0) -> T:
    """:func:`wait_until` for threads and synchronous tests."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last seen: {value!r})")
        time.sleep(POLL)


def history_has(runtime: Any, key: str, event_type: str) -> Callable[[], bool]:
    """Whether the run's history (run id or workflow id) holds an event of
    ``event_type`` and its last workflow task is committed (nothing pending)."""

    def check() -> bool:
        run = runtime.store.find_run(key)
        if run is None or run.pending_task:
            return False
        return any(e.type == event_type for e in runtime.store.load_events(run.run_id))

    return check
