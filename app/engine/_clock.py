"""The runtime's one clock: wall-clock epoch seconds.

Every component of the runtime that compares with stored times (leases,
timers, deadlines, the workflow task's ``now()``) reads this one callable,
so a test can hand the runtime a clock it advances itself
(``app.engine.testing``) instead of patching ``time``. Relative waits
(retry back-off, polling a database that is down) stay on the event loop's
own monotonic clock: they are about this process, not about stored times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

#: Returns the current time as epoch seconds (``time.time`` in production).
Clock = Callable[[], float]

system_clock: Clock = time.time


def clock_datetime(clock: Clock) -> datetime:
    """The clock's current time as an aware UTC datetime."""
    return datetime.fromtimestamp(clock(), UTC)
