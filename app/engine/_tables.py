"""The runtime's tables. Times are epoch seconds (float): portable and indexable
the same way on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

OPEN_STATUSES = ("running", "cancelling")
CLOSED_STATUSES = (
    "completed",
    "failed",
    "cancelled",
    "cleanup-incomplete",
    "timed-out",
    "terminated",
    "continued-as-new",
)
PARKED_STATUSES = ("needs-human", "blocked-nondeterministic")
#: ``error.type`` of a needs-human run whose code is alive, waiting in
#: ``ctx.wait_for_operator()`` (a cancel then runs the code's cleanup).
WAITING_FOR_OPERATOR = "WaitingForOperator"


def _json(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(JSON, nullable=nullable))


class WorkflowRun(SQLModel, table=True):
    """One run of a workflow. ``active_key`` holds the workflow id while the run
    is open or parked, so a unique constraint allows one active run per id."""

    __tablename__ = "workflow_runs"
    # The reconciler's "runnable but no job" query reads only runs that wait
    # for a workflow task, never every open run (waiting runs are most of them).
    __table_args__ = (Index("ix_workflow_runs_pending", "pending_task", "updated_at"),)

    run_id: str = Field(primary_key=True)
    workflow_id: str = Field(index=True)
    active_key: str | None = Field(default=None, unique=True)
    workflow_name: str
    workflow_version: int
    status: str = Field(index=True)
    cancel_phase: str | None = None
    cancel_reason: str | None = None
    input: Any = _json()
    result: Any = _json()
    error: Any = _json()
    history_length: int = 0
    pending_task: bool = False
    deadline_at: float | None = Field(default=None, index=True)
    deadline_notified: bool = False
    continued_from: str | None = None
    created_at: float
    updated_at: float
    closed_at: float | None = None


class HistoryEvent(SQLModel, table=True):
    __tablename__ = "history_events"

    run_id: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    type: str
    data: Any = _json(nullable=False)
    created_at: float


class ActivityTask(SQLModel, table=True):
    __tablename__ = "activity_tasks"
    __table_args__ = (
        Index("ix_activity_tasks_due", "status", "next_attempt_at"),
        Index("ix_activity_tasks_lease", "status", "lease_expires_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    cmd: int
    activity: str
    operation_id: str = Field(unique=True)
    input: Any = _json()
    input_hash: str
    options: Any = _json(nullable=False)
    has_reconcile: bool = False
    status: str  # scheduled | running | completed | failed | cancelled
    attempt: int = 0
    fencing_token: int = 0
    scheduled_at: float
    next_attempt_at: float
    schedule_to_start_deadline: float | None = Field(default=None, index=True)
    schedule_to_close_deadline: float | None = Field(default=None, index=True)
    started_at: float | None = None
    lease_expires_at: float | None = None
    heartbeat_at: float | None = None
    heartbeat_details: Any = _json()
    worker_id: str | None = None
    code_version: str | None = None
    needs_reconcile: bool = False
    cancel_requested: bool = False
    result: Any = _json()
    last_failure: Any = _json()
    closed_at: float | None = None


class ActivityAttempt(SQLModel, table=True):
    """Who ran which attempt with which code, and how it ended: every accepted
    result can be traced to a worker and a code version."""

    __tablename__ = "activity_attempts"

    id: int | None = Field(default=None, primary_key=True)
    task_id: int = Field(index=True)
    attempt: int
    fencing_token: int
    worker_id: str
    code_version: str
    started_at: float
    finished_at: float | None = None
    outcome: str | None = None
    error: Any = _json()


class Timer(SQLModel, table=True):
    __tablename__ = "timers"
    __table_args__ = (Index("ix_timers_due", "status", "fire_at"),)

    run_id: str = Field(primary_key=True)
    cmd: int = Field(primary_key=True)
    fire_at: float
    status: str = "pending"  # pending | fired | cancelled


class SignalRecord(SQLModel, table=True):
    """Every signal received, deduplicated per workflow id by its key."""

    __tablename__ = "signals"
    __table_args__ = (UniqueConstraint("workflow_id", "dedupe_key"),)

    id: int | None = Field(default=None, primary_key=True)
    workflow_id: str
    run_id: str
    name: str
    dedupe_key: str
    payload: Any = _json()
    received_at: float


class OutboxRow(SQLModel, table=True):
    """A job to dispatch, written with the state change that needs it; deleted by
    the job itself in its first transaction, re-relayed if it lingers."""

    __tablename__ = "outbox"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(unique=True)
    kind: str  # workflow_task | activity | timer
    ref: str = Field(index=True)
    queue: str
    not_before: float
    created_at: float = Field(index=True)
    #: How many times the relay has dispatched it again (each under a fresh id).
    relays: int = 0
    #: When the relay may next look at it: the time it falls due, then pushed
    #: back after each re-dispatch (exponential backoff, so a long queue is not
    #: flooded with copies while workers are merely busy).
    relay_at: float = Field(default=0.0, index=True)


class Counter(SQLModel, table=True):
    __tablename__ = "counters"

    name: str = Field(primary_key=True)
    value: int = 0


class WorkerRecord(SQLModel, table=True):
    """A live worker process. Its leases are released as soon as it stops
    beating, instead of waiting for each activity's own timeout."""

    __tablename__ = "workers"

    worker_id: str = Field(primary_key=True)
    code_version: str
    started_at: float
    last_seen: float = Field(index=True)
