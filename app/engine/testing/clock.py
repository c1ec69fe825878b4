"""A clock that moves only when the test moves it."""

from __future__ import annotations

#: 2027-01-15T08:00:00Z: a fixed start, so recorded times are the same on every run.
DEFAULT_START = 1_800_000_000.0


class ManualClock:
    """Epoch seconds; callable, so it is an ``app.engine._clock.Clock``."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"the clock only moves forward (asked to move {seconds}s)")
        self.now += seconds
