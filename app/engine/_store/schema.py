"""Table handles and constants shared by the store modules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Table

from app.engine import _history_commands as ev
from app.engine._policy import ActivityOptions
from app.engine._tables import (
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


@dataclass(frozen=True)
class Schema:
    """The engine's tables, for code outside the engine that reads them
    (dashboards, metrics, the run-move handler): ``from app.engine import
    schema``. Writes go through the engine's store, never through these."""

    runs: Table
    events: Table
    tasks: Table
    attempts: Table
    timers: Table
    signals: Table
    outbox: Table
    counters: Table
    #: The counter the store bumps when it refuses a stale write.
    STALE_WRITES: str


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


#: The public, read-only view of the tables (``app.engine.schema``).
PUBLIC = Schema(
    runs=runs,
    events=events,
    tasks=tasks,
    attempts=attempts,
    timers=timers,
    signals=signals,
    outbox=outbox,
    counters=counters,
    STALE_WRITES=STALE_WRITES,
)
