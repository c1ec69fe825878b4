"""Plain records the store hands out: runs, claims, failures, lingering jobs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.engine._jobs import Job, relayed_id
from app.engine._policy import ActivityOptions


@dataclass(frozen=True)
class StartResult:
    run_id: str
    created: bool


@dataclass(frozen=True)
class RunRow:
    run_id: str
    workflow_id: str
    workflow_name: str
    workflow_version: int
    status: str
    cancel_phase: str | None
    history_length: int
    pending_task: bool
    input: Any
    result: Any
    error: Any
    created_at: float
    updated_at: float
    closed_at: float | None
    deadline_at: float | None
    continued_from: str | None


@dataclass(frozen=True)
class Claim:
    task_id: int
    run_id: str
    #: The workflow's command number that scheduled the task.
    cmd: int
    workflow_id: str
    activity: str
    operation_id: str
    input: Any
    attempt: int
    token: int
    needs_reconcile: bool
    options: ActivityOptions
    started_at: float
    #: The last heartbeat details recorded for this task (by an earlier
    #: attempt when this one is a retry): where a checkpointing activity resumes.
    heartbeat_details: Any = None


@dataclass(frozen=True)
class Failure:
    failure_class: str  # transient | permanent | ambiguous | cancelled | timeout
    error_type: str
    message: str
    next_retry_delay: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "failure_class": self.failure_class,
            "error_type": self.error_type,
            "message": self.message,
        }


def run_row(row: Any) -> RunRow:
    return RunRow(**{name: getattr(row, name) for name in RunRow.__dataclass_fields__})


@dataclass(frozen=True)
class Lingering:
    """An outbox row the relay looks at: its job went out and nobody took it
    within the grace (or since the relay last looked)."""

    row_id: int
    #: How many times the relay has sent it again.
    relays: int
    #: When it fell due.
    due: float
    #: The job under the id it was first sent with.
    job: Job

    def sent_as(self, relay: int) -> Job:
        """The job as the ``relay``-th re-dispatch sends it (0: the first send)."""
        return replace(self.job, job_id=relayed_id(self.job.job_id, relay))

    @property
    def last_sent(self) -> Job:
        """The job as the channel holds it, if it holds it."""
        return self.sent_as(self.relays)
