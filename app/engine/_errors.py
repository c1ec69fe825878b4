"""Errors of the durable runtime.

Retryability is carried by the error type, not by ``if`` chains at call sites:
an activity raises :class:`TransientError`, :class:`PermanentError` or
:class:`AmbiguousError` and the runtime knows what to do. Any other exception
an activity raises counts as transient unless its type name is listed in the
activity's ``non_retryable_error_types``.
"""

from __future__ import annotations

from typing import Any


class ActivityFailure(Exception):
    """Base of the failure classes an activity may raise."""

    failure_class = "transient"

    def __init__(self, message: str, *, next_retry_delay: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Seconds the runtime waits before the next attempt (overrides backoff).
        self.next_retry_delay = next_retry_delay


class TransientError(ActivityFailure):
    """The attempt failed but a later one may succeed: retry with backoff."""

    failure_class = "transient"


class PermanentError(ActivityFailure):
    """No attempt will ever succeed: fail the activity now, no retry."""

    failure_class = "permanent"


class AmbiguousError(ActivityFailure):
    """The effect may or may not have happened (a lost response after a mutation).

    Before any retry the runtime runs the activity's reconcile function: found ->
    accept its result; absent -> retry; unknown -> park the run as ``needs-human``.
    """

    failure_class = "ambiguous"


class ActivityCancelled(ActivityFailure):
    """Raised by an activity that stopped because cancellation was requested."""

    failure_class = "cancelled"


class StaleLease(Exception):
    """This worker's lease was superseded: its writes are rejected (fencing)."""


class ActivityError(Exception):
    """Raised inside workflow code when an activity ended in failure."""

    def __init__(
        self,
        message: str,
        *,
        activity: str,
        failure_class: str,
        error_type: str,
        attempts: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.activity = activity
        self.failure_class = failure_class
        self.error_type = error_type
        self.attempts = attempts
        self.details = details or {}


class WorkflowCancelled(Exception):
    """Raised inside workflow code at its current await when cancellation is requested.

    Workflow code may catch it to stop active work, preserve evidence and clean
    owned resources (see ``ctx.stop_active_work()`` and ``ctx.enter_cancel_phase``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CleanupIncomplete(Exception):
    """Raised by workflow code when cancellation cleanup could not finish."""

    def __init__(self, reason: str, *, leftovers: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.leftovers = leftovers or []


class DeadlineExceeded(Exception):
    """Raised inside workflow code when the run passes its workflow deadline."""


class NeedsHuman(Exception):
    """Raised (by the runtime or workflow code) to park the run for a human."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NondeterminismError(Exception):
    """A command does not match the recorded history at its position."""

    def __init__(self, position: int, expected: dict[str, Any] | None, actual: dict[str, Any]):
        self.position = position
        self.expected = expected
        self.actual = actual
        super().__init__(self.diff())

    def diff(self) -> str:
        return (
            f"non-deterministic workflow at command {self.position}:\n"
            f"  history has: {self.expected}\n"
            f"  code issued: {self.actual}"
        )


class OperationIdConflict(Exception):
    """An operation id was reused with different parameters: never a retry."""


class WorkflowNotFound(LookupError):
    pass


class UnknownWorkflow(LookupError):
    """No registered workflow has this name and version."""


class DeterminismViolation(Exception):
    """Workflow source reads the clock, randomness, the network or the disk."""
