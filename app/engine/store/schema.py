"""Table handles and constants shared by the store modules."""

from __future__ import annotations

from datetime import datetime

from app.engine import history_commands as ev
from app.engine.policy import ActivityOptions
from app.engine.tables import (
    ActivityAttempt,
    ActivityTask,
    Counter,
    HistoryEvent,
    OutboxRow,
    SignalRecord,
    Timer,
    WorkflowRun,
)

runs = WorkflowRun.__table__  # type: ignore[attr-defined]
events = HistoryEvent.__table__  # type: ignore[attr-defined]
tasks = ActivityTask.__table__  # type: ignore[attr-defined]
attempts = ActivityAttempt.__table__  # type: ignore[attr-defined]
timers = Timer.__table__  # type: ignore[attr-defined]
signals = SignalRecord.__table__  # type: ignore[attr-defined]
outbox = OutboxRow.__table__  # type: ignore[attr-defined]
counters = Counter.__table__  # type: ignore[attr-defined]

#: Jobs may be delivered a little early (timer rounding); accept them.
EARLY_TOLERANCE = 0.05
STALE_WRITES = "stale_writes_rejected"

TERMINAL_EVENT = {
    "completed": ev.WORKFLOW_COMPLETED,
    "failed": ev.WORKFLOW_FAILED,
    "timed-out": ev.WORKFLOW_FAILED,
    "cancelled": ev.WORKFLOW_CANCELLED,
    "cleanup-incomplete": ev.WORKFLOW_CANCELLED,
    "continued-as-new": ev.CONTINUED_AS_NEW,
    "needs-human": ev.RUN_PARKED,
    "blocked-nondeterministic": ev.RUN_PARKED,
}


def lease_expiry(options: ActivityOptions, *, started_at: float, now: float) -> float:
    timeouts = options.timeouts
    expiry = started_at + timeouts.start_to_close
    if timeouts.heartbeat is not None:
        expiry = min(expiry, now + timeouts.heartbeat)
    return expiry


def parse_timestamp(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()
