"""Retry policy and timeouts of an activity, fixed when the activity is declared."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How attempts are spaced and when to give up.

    ``max_attempts`` counts attempts, not retries (1 means never retry).
    ``non_retryable_error_types`` names exception classes (by ``__name__``)
    that fail the activity at once, as :class:`PermanentError` does.
    """

    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    max_attempts: int = 5
    non_retryable_error_types: tuple[str, ...] = ()

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (2, 3, ...)."""
        exponent = max(0, attempt - 2)
        return float(min(self.max_interval, self.initial_interval * self.backoff**exponent))


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """The four activity timeouts, in seconds (``None`` = not enforced).

    - schedule_to_start: scheduled until an attempt starts (queue wait).
    - start_to_close: one attempt, start to finish.
    - heartbeat: longest silence between heartbeats of a running attempt.
    - schedule_to_close: the whole activity, all attempts and waits included.
    """

    schedule_to_start: float | None = None
    start_to_close: float = 300.0
    heartbeat: float | None = None
    schedule_to_close: float | None = None


@dataclass(frozen=True, kw_only=True)
class ActivityOptions:
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeouts: Timeouts = field(default_factory=Timeouts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["retry"]["non_retryable_error_types"] = list(self.retry.non_retryable_error_types)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActivityOptions:
        retry = dict(data["retry"])
        retry["non_retryable_error_types"] = tuple(retry.get("non_retryable_error_types", ()))
        return cls(retry=RetryPolicy(**retry), timeouts=Timeouts(**data["timeouts"]))
