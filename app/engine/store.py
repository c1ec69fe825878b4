"""Every durable state change of the runtime, each in one short transaction.

The rules that make the runtime safe live here:

- history is appended only through :meth:`Tx.append_event` (which bumps the
  run's history length under the row lock) or by a workflow-task commit that
  is guarded by the history length it replayed (optimistic concurrency);
- activity completion, failure and heartbeats are accepted only with the
  attempt's current fencing token; stale writes are rejected and counted;
- every state change that needs work done writes its outbox row (a job) in
  the same transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from app.engine import commands as ev
from app.engine.commands import Command, Event
from app.engine.errors import StaleLease
from app.engine.faults import FaultPoints
from app.engine.jobs import Job, activity_job, timer_job, workflow_queue, workflow_task_job
from app.engine.policy import ActivityOptions
from app.engine.replay import Outcome, StepResult
from app.engine.tables import (
    OPEN_STATUSES,
    PARKED_STATUSES,
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
    workflow_id: str
    activity: str
    operation_id: str
    input: Any
    attempt: int
    token: int
    needs_reconcile: bool
    options: ActivityOptions
    started_at: float


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


def _run_row(row: Any) -> RunRow:
    return RunRow(**{name: getattr(row, name) for name in RunRow.__dataclass_fields__})


@dataclass
class Tx:
    """One transaction plus the jobs it wrote, to dispatch after commit."""

    conn: Connection
    now: float
    jobs: list[Job] = field(default_factory=list)

    # -- outbox ----------------------------------------------------------------

    def add_job(self, job: Job) -> None:
        values = {
            "job_id": job.job_id,
            "kind": job.kind,
            "ref": job.ref,
            "queue": job.queue,
            "not_before": job.not_before,
            "created_at": self.now,
        }
        dialect = self.conn.dialect.name
        stmt: Any
        if dialect == "postgresql":
            stmt = pg_insert(outbox).values(**values).on_conflict_do_nothing()
        elif dialect == "sqlite":
            stmt = sqlite_insert(outbox).values(**values).on_conflict_do_nothing()
        else:  # pragma: no cover - only SQLite and PostgreSQL are supported
            stmt = insert(outbox).values(**values)
        self.conn.execute(stmt)
        self.jobs.append(job)

    # -- history ---------------------------------------------------------------

    def append_event(self, run_id: str, type_: str, data: dict[str, Any]) -> int | None:
        """Append an event from outside the workflow task; None if the run is not open."""
        row = self.conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id, runs.c.status.in_(OPEN_STATUSES))
            .values(
                history_length=runs.c.history_length + 1,
                pending_task=True,
                updated_at=self.now,
            )
            .returning(runs.c.history_length, runs.c.workflow_name, runs.c.workflow_version)
        ).first()
        if row is None:
            return None
        seq = int(row.history_length)
        self.conn.execute(
            insert(events).values(
                run_id=run_id, seq=seq, type=type_, data=data, created_at=self.now
            )
        )
        queue = workflow_queue(row.workflow_name, row.workflow_version)
        self.add_job(workflow_task_job(run_id, seq, queue))
        return seq

    # -- client operations (usable inside a caller's transaction) -------------

    def active_run(self, workflow_id: str) -> RunRow | None:
        row = self.conn.execute(select(runs).where(runs.c.active_key == workflow_id)).first()
        return _run_row(row) if row else None

    def start_run(
        self,
        *,
        workflow_name: str,
        workflow_version: int,
        workflow_id: str,
        input: Any,
        deadline_seconds: float | None = None,
        continued_from: str | None = None,
    ) -> StartResult:
        """Start a run unless one is active for ``workflow_id`` (then return it)."""
        existing = self.active_run(workflow_id)
        if existing is not None:
            return StartResult(existing.run_id, created=False)
        count = self.conn.execute(
            select(func.count()).select_from(runs).where(runs.c.workflow_id == workflow_id)
        ).scalar_one()
        run_id = f"{workflow_id}/{int(count) + 1}"
        try:
            with self.conn.begin_nested():
                self.conn.execute(
                    insert(runs).values(
                        run_id=run_id,
                        workflow_id=workflow_id,
                        active_key=workflow_id,
                        workflow_name=workflow_name,
                        workflow_version=workflow_version,
                        status="running",
                        input=input,
                        history_length=1,
                        pending_task=True,
                        deadline_at=self.now + deadline_seconds if deadline_seconds else None,
                        continued_from=continued_from,
                        created_at=self.now,
                        updated_at=self.now,
                    )
                )
        except IntegrityError:
            # A concurrent start won the race for this workflow id.
            raced = self.active_run(workflow_id)
            if raced is None:
                raise
            return StartResult(raced.run_id, created=False)
        started = {
            "input": input,
            "workflow": workflow_name,
            "version": workflow_version,
            "workflow_id": workflow_id,
        }
        self.conn.execute(
            insert(events).values(
                run_id=run_id, seq=1, type=ev.WORKFLOW_STARTED, data=started, created_at=self.now
            )
        )
        self.add_job(workflow_task_job(run_id, 1, workflow_queue(workflow_name, workflow_version)))
        return StartResult(run_id, created=True)

    def signal(self, workflow_id: str, name: str, payload: Any, dedupe_key: str) -> bool:
        """Deliver a signal once per dedupe key; False if duplicate or no open run."""
        run = self.active_run(workflow_id)
        if run is None or run.status not in OPEN_STATUSES:
            return False
        try:
            with self.conn.begin_nested():
                self.conn.execute(
                    insert(signals).values(
                        workflow_id=workflow_id,
                        run_id=run.run_id,
                        name=name,
                        dedupe_key=dedupe_key,
                        payload=payload,
                        received_at=self.now,
                    )
                )
        except IntegrityError:
            return False
        data = {"name": name, "payload": payload, "dedupe_key": dedupe_key}
        return self.append_event(run.run_id, ev.SIGNAL_RECEIVED, data) is not None

    def request_cancel(self, workflow_id: str, reason: str) -> bool:
        run = self.active_run(workflow_id)
        if run is None:
            return False
        if run.status in PARKED_STATUSES:
            # Parked runs run no code: close them as cancelled straight away.
            self._close_run(run.run_id, "cancelled", error={"reason": reason})
            return True
        moved = self.conn.execute(
            update(runs)
            .where(runs.c.run_id == run.run_id, runs.c.status == "running")
            .values(status="cancelling", cancel_phase="cancel-requested", cancel_reason=reason)
        ).rowcount
        if not moved:
            return False
        return self.append_event(run.run_id, ev.CANCEL_REQUESTED, {"reason": reason}) is not None

    def terminate(self, workflow_id: str, reason: str) -> dict[str, Any] | None:
        """End the active run now, without running workflow code; report what is uncertain."""
        run = self.active_run(workflow_id)
        if run is None:
            return None
        in_flight = self.conn.execute(
            select(tasks).where(
                tasks.c.run_id == run.run_id, tasks.c.status.in_(("scheduled", "running"))
            )
        ).all()
        uncertain = [
            {
                "operation_id": t.operation_id,
                "activity": t.activity,
                "status": t.status,
                "attempt": t.attempt,
                "worker_id": t.worker_id,
                # An attempt that started may have had its effect; we cannot know.
                "effect": "unknown" if t.attempt > 0 else "not-started",
            }
            for t in in_flight
        ]
        record = {"reason": reason, "uncertain": uncertain}
        self.conn.execute(
            insert(events).values(
                run_id=run.run_id,
                seq=run.history_length + 1,
                type=ev.WORKFLOW_TERMINATED,
                data=record,
                created_at=self.now,
            )
        )
        self.conn.execute(
            update(runs)
            .where(runs.c.run_id == run.run_id)
            .values(history_length=run.history_length + 1)
        )
        self._close_run(run.run_id, "terminated", error=record)
        return record

    def _close_run(
        self, run_id: str, status: str, *, result: Any = None, error: Any = None
    ) -> None:
        parked = status in PARKED_STATUSES
        values: dict[str, Any] = {
            "status": status,
            "result": result,
            "error": error,
            "pending_task": False,
            "updated_at": self.now,
        }
        if not parked:
            values |= {"active_key": None, "closed_at": self.now}
        self.conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))
        if parked:
            return
        # Nothing may keep running for a closed run: stop its tasks and timers.
        self.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "scheduled")
            .values(status="cancelled", closed_at=self.now)
        )
        self.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "running")
            .values(cancel_requested=True)
        )
        self.conn.execute(
            update(timers)
            .where(timers.c.run_id == run_id, timers.c.status == "pending")
            .values(status="cancelled")
        )

    def bump_counter(self, name: str, by: int = 1) -> None:
        moved = self.conn.execute(
            update(counters).where(counters.c.name == name).values(value=counters.c.value + by)
        ).rowcount
        if not moved:
            try:
                with self.conn.begin_nested():
                    self.conn.execute(insert(counters).values(name=name, value=by))
            except IntegrityError:
                self.conn.execute(
                    update(counters)
                    .where(counters.c.name == name)
                    .values(value=counters.c.value + by)
                )


class Store:
    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.time,
        faults: FaultPoints | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.faults = faults or FaultPoints()

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.engine.begin() as conn:
            yield Tx(conn, self.clock())

    # -- reads -----------------------------------------------------------------

    def load_run(self, run_id: str) -> RunRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
        return _run_row(row) if row else None

    def find_run(self, key: str) -> RunRow | None:
        """A run by run id, or the newest run of a workflow id."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == key)).first()
            if row is None:
                row = conn.execute(
                    select(runs)
                    .where(runs.c.workflow_id == key)
                    .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
                    .limit(1)
                ).first()
        return _run_row(row) if row else None

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunRow]:
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if status:
            query = query.where(runs.c.status == status)
        with self.engine.connect() as conn:
            return [_run_row(r) for r in conn.execute(query).all()]

    def load_events(self, run_id: str, *, after: int = 0) -> list[Event]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(events.c.seq, events.c.type, events.c.data)
                .where(events.c.run_id == run_id, events.c.seq > after)
                .order_by(events.c.seq)
            ).all()
        return [Event(seq=r.seq, type=r.type, data=r.data) for r in rows]

    def activity_attempts(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    tasks.c.operation_id,
                    tasks.c.activity,
                    tasks.c.status.label("task_status"),
                    attempts.c.attempt,
                    attempts.c.fencing_token,
                    attempts.c.worker_id,
                    attempts.c.code_version,
                    attempts.c.started_at,
                    attempts.c.finished_at,
                    attempts.c.outcome,
                    attempts.c.error,
                )
                .join(attempts, attempts.c.task_id == tasks.c.id)
                .where(tasks.c.run_id == run_id)
                .order_by(attempts.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    def counter(self, name: str) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(select(counters.c.value).where(counters.c.name == name)).scalar()
        return int(value or 0)

    # -- workflow tasks --------------------------------------------------------

    def commit_workflow_task(
        self, run: RunRow, step: StepResult, *, max_history_events: int = 2000
    ) -> list[Job] | None:
        """Commit a workflow task's commands; None if history moved meanwhile."""
        del max_history_events  # the cap is enforced by the workflow (should_continue_as_new)
        with self.transaction() as tx:
            written = len(step.commands) + (1 if step.outcome is not None else 0)
            new_length = run.history_length + written
            values: dict[str, Any] = {
                "history_length": new_length,
                "pending_task": False,
                "updated_at": tx.now,
            }
            if step.cancel_phase:
                values["cancel_phase"] = step.cancel_phase
            guarded = tx.conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run.run_id,
                    runs.c.history_length == run.history_length,
                    runs.c.status.in_(OPEN_STATUSES),
                )
                .values(**values)
            ).rowcount
            if not guarded:
                return None  # nothing written yet: the empty transaction commits harmlessly
            tx.conn.execute(
                delete(outbox).where(outbox.c.kind == "workflow_task", outbox.c.ref == run.run_id)
            )
            follow_ups: list[tuple[str, dict[str, Any]]] = []
            seq = run.history_length
            for command in step.commands:
                seq += 1
                self._write_command(tx, run, seq, command, follow_ups)
            if step.outcome is not None:
                seq += 1
                self._write_outcome(tx, run, seq, step.outcome)
            if step.cancel_delivered:
                follow_ups.extend(self._stop_active_work(tx, run.run_id))
            for type_, data in follow_ups:
                tx.append_event(run.run_id, type_, data)
            self.faults.hit("workflow_task.mid_commit")
            return tx.jobs

    def _write_command(
        self,
        tx: Tx,
        run: RunRow,
        seq: int,
        command: Command,
        follow_ups: list[tuple[str, dict[str, Any]]],
    ) -> None:
        data = command.to_event_data()
        if command.type == ev.ACTIVITY_SCHEDULED:
            # The input lives in the task row; history keeps its hash only.
            data = {k: v for k, v in data.items() if k not in ("input", "options")}
        tx.conn.execute(
            insert(events).values(
                run_id=run.run_id, seq=seq, type=command.type, data=data, created_at=tx.now
            )
        )
        attrs = command.attrs
        if command.type == ev.ACTIVITY_SCHEDULED:
            conflict = self._schedule_activity(tx, run, command)
            if conflict is not None:
                follow_ups.append(conflict)
        elif command.type == ev.TIMER_STARTED:
            fire_at = _parse_ts(attrs["fire_at"])
            tx.conn.execute(
                insert(timers).values(run_id=run.run_id, cmd=command.cmd, fire_at=fire_at)
            )
            tx.add_job(timer_job(run.run_id, command.cmd, fire_at))
        elif command.type == ev.TIMER_CANCELLED:
            tx.conn.execute(
                update(timers)
                .where(
                    timers.c.run_id == run.run_id,
                    timers.c.cmd == attrs["timer"],
                    timers.c.status == "pending",
                )
                .values(status="cancelled")
            )

    def _schedule_activity(
        self, tx: Tx, run: RunRow, command: Command
    ) -> tuple[str, dict[str, Any]] | None:
        attrs = command.attrs
        op = attrs["operation_id"]
        existing = tx.conn.execute(select(tasks).where(tasks.c.operation_id == op)).first()
        if existing is not None:
            base = {"cmd": command.cmd, "activity": attrs["activity"], "attempts": 0}
            if existing.input_hash == attrs["input_hash"] and existing.status == "completed":
                # The same operation, already done: its result is the answer.
                return ev.ACTIVITY_COMPLETED, base | {"result": existing.result, "reused": op}
            reason = (
                "with different parameters"
                if existing.input_hash != attrs["input_hash"]
                else f"while the first use is {existing.status}"
            )
            return ev.ACTIVITY_FAILED, base | {
                "failure_class": "permanent",
                "error_type": "OperationIdConflict",
                "message": f"operation id {op!r} reused {reason}; an operation id names one effect",
            }
        options = ActivityOptions.from_json(attrs["options"])
        timeouts = options.timeouts
        now = tx.now
        task_id = tx.conn.execute(
            insert(tasks)
            .values(
                run_id=run.run_id,
                cmd=command.cmd,
                activity=attrs["activity"],
                operation_id=op,
                input=attrs["input"],
                input_hash=attrs["input_hash"],
                options=attrs["options"],
                has_reconcile=bool(attrs.get("has_reconcile")),
                status="scheduled",
                scheduled_at=now,
                next_attempt_at=now,
                schedule_to_start_deadline=(
                    now + timeouts.schedule_to_start if timeouts.schedule_to_start else None
                ),
                schedule_to_close_deadline=(
                    now + timeouts.schedule_to_close if timeouts.schedule_to_close else None
                ),
            )
            .returning(tasks.c.id)
        ).scalar_one()
        tx.add_job(activity_job(int(task_id), 1))
        return None

    def _write_outcome(self, tx: Tx, run: RunRow, seq: int, outcome: Outcome) -> None:
        data: dict[str, Any] = {"status": outcome.status}
        if outcome.result is not None:
            data["result"] = outcome.result
        if outcome.error is not None:
            data["error"] = outcome.error
        tx.conn.execute(
            insert(events).values(
                run_id=run.run_id,
                seq=seq,
                type=TERMINAL_EVENT[outcome.status],
                data=data,
                created_at=tx.now,
            )
        )
        tx._close_run(run.run_id, outcome.status, result=outcome.result, error=outcome.error)
        if outcome.status == "continued-as-new":
            tx.start_run(
                workflow_name=run.workflow_name,
                workflow_version=run.workflow_version,
                workflow_id=run.workflow_id,
                input=outcome.continue_input,
                continued_from=run.run_id,
            )

    def _stop_active_work(self, tx: Tx, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Cancellation reached the code: stop queued activities, tell running ones."""
        queued = tx.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "scheduled")
            .values(status="cancelled", cancel_requested=True, closed_at=tx.now)
            .returning(tasks.c.cmd, tasks.c.activity, tasks.c.attempt)
        ).all()
        tx.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "running")
            .values(cancel_requested=True)
        )
        return [
            (
                ev.ACTIVITY_FAILED,
                {
                    "cmd": row.cmd,
                    "activity": row.activity,
                    "attempts": row.attempt,
                    "failure_class": "cancelled",
                    "error_type": "ActivityCancelled",
                    "message": "cancelled before it started",
                },
            )
            for row in queued
        ]

    def discard_workflow_task_jobs(self, run_id: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute(
                delete(outbox).where(outbox.c.kind == "workflow_task", outbox.c.ref == run_id)
            )
            tx.conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.status.not_in(OPEN_STATUSES))
                .values(pending_task=False)
            )

    # -- activity attempts -----------------------------------------------------

    def claim_activity(self, task_id: int, *, worker_id: str, code_version: str) -> Claim | None:
        with self.transaction() as tx:
            row = tx.conn.execute(
                select(tasks, runs.c.workflow_id)
                .join(runs, runs.c.run_id == tasks.c.run_id)
                .where(tasks.c.id == task_id)
            ).first()
            if row is None or row.status != "scheduled":
                return None
            if row.next_attempt_at > tx.now + EARLY_TOLERANCE:
                return None
            options = ActivityOptions.from_json(row.options)
            token = row.fencing_token + 1
            attempt = row.attempt + 1
            claimed = tx.conn.execute(
                update(tasks)
                .where(
                    tasks.c.id == task_id,
                    tasks.c.status == "scheduled",
                    tasks.c.fencing_token == row.fencing_token,
                )
                .values(
                    status="running",
                    attempt=attempt,
                    fencing_token=token,
                    started_at=tx.now,
                    heartbeat_at=tx.now,
                    lease_expires_at=_lease_expiry(options, started_at=tx.now, now=tx.now),
                    worker_id=worker_id,
                    code_version=code_version,
                )
            ).rowcount
            if not claimed:
                return None
            tx.conn.execute(
                insert(attempts).values(
                    task_id=task_id,
                    attempt=attempt,
                    fencing_token=token,
                    worker_id=worker_id,
                    code_version=code_version,
                    started_at=tx.now,
                )
            )
            tx.conn.execute(
                delete(outbox).where(outbox.c.kind == "activity", outbox.c.ref == str(task_id))
            )
            return Claim(
                task_id=task_id,
                run_id=row.run_id,
                workflow_id=row.workflow_id,
                activity=row.activity,
                operation_id=row.operation_id,
                input=row.input,
                attempt=attempt,
                token=token,
                needs_reconcile=bool(row.needs_reconcile),
                options=options,
                started_at=tx.now,
            )

    def heartbeat(self, task_id: int, token: int, details: Any = None) -> bool:
        """Extend the lease; returns whether cancellation was requested.

        Raises :class:`StaleLease` when this attempt no longer holds the lease.
        """
        answer = self._heartbeat(task_id, token, details)
        if answer is None:
            raise StaleLease(f"activity task {task_id}: token {token} is no longer current")
        return answer

    def _heartbeat(self, task_id: int, token: int, details: Any) -> bool | None:
        with self.transaction() as tx:
            row = tx.conn.execute(
                select(tasks.c.options, tasks.c.started_at, tasks.c.cancel_requested).where(
                    tasks.c.id == task_id,
                    tasks.c.fencing_token == token,
                    tasks.c.status == "running",
                )
            ).first()
            if row is None:
                self._reject_stale(tx, task_id, token, "heartbeat")
                return None
            options = ActivityOptions.from_json(row.options)
            tx.conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id, tasks.c.fencing_token == token)
                .values(
                    heartbeat_at=tx.now,
                    heartbeat_details=details,
                    lease_expires_at=_lease_expiry(options, started_at=row.started_at, now=tx.now),
                )
            )
            return bool(row.cancel_requested)

    def complete_activity(
        self, task_id: int, token: int, result: Any, *, outcome: str = "completed"
    ) -> list[Job]:
        """Accept an attempt's result, only from the current token holder."""
        jobs = self._complete(task_id, token, result, outcome)
        if jobs is None:
            raise StaleLease(f"activity task {task_id}: completion with stale token {token}")
        return jobs

    def _complete(self, task_id: int, token: int, result: Any, outcome: str) -> list[Job] | None:
        with self.transaction() as tx:
            row = tx.conn.execute(
                update(tasks)
                .where(
                    tasks.c.id == task_id,
                    tasks.c.fencing_token == token,
                    tasks.c.status == "running",
                )
                .values(status="completed", result=result, closed_at=tx.now)
                .returning(
                    tasks.c.run_id,
                    tasks.c.cmd,
                    tasks.c.activity,
                    tasks.c.attempt,
                    tasks.c.worker_id,
                    tasks.c.code_version,
                )
            ).first()
            if row is None:
                self._reject_stale(tx, task_id, token, "completion")
                return None
            self._finish_attempt(tx, task_id, token, outcome, None)
            tx.append_event(
                row.run_id,
                ev.ACTIVITY_COMPLETED,
                {
                    "cmd": row.cmd,
                    "activity": row.activity,
                    "result": result,
                    "attempts": row.attempt,
                    "worker_id": row.worker_id,
                    "code_version": row.code_version,
                },
            )
            return tx.jobs

    def fail_activity(self, task_id: int, token: int, failure: Failure) -> list[Job]:
        """Record a failed attempt: retry later, or fail the activity for good."""
        jobs = self._fail(task_id, token, failure)
        if jobs is None:
            raise StaleLease(f"activity task {task_id}: failure with stale token {token}")
        return jobs

    def _fail(self, task_id: int, token: int, failure: Failure) -> list[Job] | None:
        with self.transaction() as tx:
            row = tx.conn.execute(
                select(tasks).where(
                    tasks.c.id == task_id,
                    tasks.c.fencing_token == token,
                    tasks.c.status == "running",
                )
            ).first()
            if row is None:
                self._reject_stale(tx, task_id, token, "failure")
                return None
            options = ActivityOptions.from_json(row.options)
            retry = options.retry
            delay = (
                failure.next_retry_delay
                if failure.next_retry_delay is not None
                else retry.delay_before(row.attempt + 1)
            )
            deadline = row.schedule_to_close_deadline
            final = (
                failure.failure_class in ("permanent", "cancelled")
                or failure.error_type in retry.non_retryable_error_types
                or row.attempt >= retry.max_attempts
                or bool(row.cancel_requested)
                or (deadline is not None and tx.now + delay >= deadline)
            )
            self._finish_attempt(tx, task_id, token, f"failed:{failure.failure_class}", failure)
            if not final:
                tx.conn.execute(
                    update(tasks)
                    .where(tasks.c.id == task_id, tasks.c.fencing_token == token)
                    .values(
                        status="scheduled",
                        next_attempt_at=tx.now + delay,
                        needs_reconcile=failure.failure_class == "ambiguous",
                        last_failure=failure.to_json(),
                        lease_expires_at=None,
                    )
                )
                tx.add_job(activity_job(task_id, row.attempt + 1, tx.now + delay))
                return tx.jobs
            status = "cancelled" if failure.failure_class == "cancelled" else "failed"
            tx.conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id, tasks.c.fencing_token == token)
                .values(status=status, last_failure=failure.to_json(), closed_at=tx.now)
            )
            tx.append_event(
                row.run_id,
                ev.ACTIVITY_FAILED,
                {"cmd": row.cmd, "activity": row.activity, "attempts": row.attempt}
                | failure.to_json(),
            )
            return tx.jobs

    def park_for_human(self, task_id: int, token: int, reason: str) -> None:
        """Reconcile could not tell whether the effect happened: stop and ask."""
        with self.transaction() as tx:
            row = tx.conn.execute(
                update(tasks)
                .where(
                    tasks.c.id == task_id,
                    tasks.c.fencing_token == token,
                    tasks.c.status == "running",
                )
                .values(
                    status="failed",
                    closed_at=tx.now,
                    last_failure={"failure_class": "needs-human", "message": reason},
                )
                .returning(tasks.c.run_id, tasks.c.operation_id, tasks.c.activity)
            ).first()
            if row is None:
                self._reject_stale(tx, task_id, token, "park")
                return
            failure = Failure("needs-human", "Unknown", reason)
            self._finish_attempt(tx, task_id, token, "needs-human", failure)
            run = tx.conn.execute(select(runs).where(runs.c.run_id == row.run_id)).first()
            if run is None or run.status not in OPEN_STATUSES:
                return
            record = {
                "reason": reason,
                "operation_id": row.operation_id,
                "activity": row.activity,
            }
            tx.conn.execute(
                insert(events).values(
                    run_id=row.run_id,
                    seq=run.history_length + 1,
                    type=ev.RUN_PARKED,
                    data={"status": "needs-human", "error": record},
                    created_at=tx.now,
                )
            )
            tx.conn.execute(
                update(runs)
                .where(runs.c.run_id == row.run_id)
                .values(history_length=run.history_length + 1)
            )
            tx._close_run(row.run_id, "needs-human", error=record)

    def _finish_attempt(
        self, tx: Tx, task_id: int, token: int, outcome: str, failure: Failure | None
    ) -> None:
        tx.conn.execute(
            update(attempts)
            .where(attempts.c.task_id == task_id, attempts.c.fencing_token == token)
            .values(
                finished_at=tx.now,
                outcome=outcome,
                error=failure.to_json() if failure else None,
            )
        )

    def _reject_stale(self, tx: Tx, task_id: int, token: int, what: str) -> None:
        tx.bump_counter(STALE_WRITES)
        tx.conn.execute(
            update(attempts)
            .where(
                attempts.c.task_id == task_id,
                attempts.c.fencing_token == token,
                attempts.c.outcome.is_(None),
            )
            .values(outcome=f"stale-{what}-rejected", finished_at=tx.now)
        )

    # -- timers ----------------------------------------------------------------

    def fire_timer(self, run_id: str, cmd: int) -> list[Job]:
        with self.transaction() as tx:
            fired = tx.conn.execute(
                update(timers)
                .where(
                    timers.c.run_id == run_id,
                    timers.c.cmd == cmd,
                    timers.c.status == "pending",
                    timers.c.fire_at <= tx.now + EARLY_TOLERANCE,
                )
                .values(status="fired")
            ).rowcount
            tx.conn.execute(
                delete(outbox).where(outbox.c.kind == "timer", outbox.c.ref == f"{run_id}|{cmd}")
            )
            if fired:
                tx.append_event(run_id, ev.TIMER_FIRED, {"cmd": cmd})
            return tx.jobs

    # -- reconciler queries (all indexed; none scans every run) ---------------

    def expired_leases(self, now: float, limit: int = 100) -> list[tuple[int, int, Failure]]:
        """Running attempts whose lease ran out: their worker is gone or too slow."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    tasks.c.id,
                    tasks.c.fencing_token,
                    tasks.c.options,
                    tasks.c.started_at,
                    tasks.c.has_reconcile,
                )
                .where(tasks.c.status == "running", tasks.c.lease_expires_at < now)
                .limit(limit)
            ).all()
        out = []
        for row in rows:
            options = ActivityOptions.from_json(row.options)
            overran = row.started_at + options.timeouts.start_to_close <= now
            kind = "StartToCloseTimeout" if overran else "HeartbeatTimeout"
            # The lost attempt may have had its effect: with a reconcile function
            # that is an ambiguous failure, resolved before any retry.
            failure_class = "ambiguous" if row.has_reconcile else "transient"
            message = f"attempt lease expired ({kind}); the worker died or stalled"
            out.append((row.id, row.fencing_token, Failure(failure_class, kind, message)))
        return out

    def expired_schedules(self, now: float, limit: int = 100) -> list[tuple[int, str]]:
        """Tasks past schedule-to-start (never started) or schedule-to-close."""
        with self.engine.connect() as conn:
            to_start = conn.execute(
                select(tasks.c.id)
                .where(
                    tasks.c.status == "scheduled",
                    tasks.c.attempt == 0,
                    tasks.c.schedule_to_start_deadline < now,
                )
                .limit(limit)
            ).scalars()
            to_close = conn.execute(
                select(tasks.c.id)
                .where(
                    tasks.c.status.in_(("scheduled", "running")),
                    tasks.c.schedule_to_close_deadline < now,
                )
                .limit(limit)
            ).scalars()
            return [(i, "ScheduleToStartTimeout") for i in to_start] + [
                (i, "ScheduleToCloseTimeout") for i in to_close
            ]

    def time_out_task(self, task_id: int, error_type: str) -> list[Job]:
        """Fail a task for good on a schedule timeout, whatever attempt holds it."""
        with self.transaction() as tx:
            row = tx.conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id, tasks.c.status.in_(("scheduled", "running")))
                .values(
                    status="failed",
                    closed_at=tx.now,
                    cancel_requested=True,
                    last_failure={"failure_class": "timeout", "error_type": error_type},
                )
                .returning(tasks.c.run_id, tasks.c.cmd, tasks.c.activity, tasks.c.attempt)
            ).first()
            if row is None:
                return []
            tx.append_event(
                row.run_id,
                ev.ACTIVITY_FAILED,
                {
                    "cmd": row.cmd,
                    "activity": row.activity,
                    "attempts": row.attempt,
                    "failure_class": "timeout",
                    "error_type": error_type,
                    "message": f"activity {row.activity} hit its {error_type}",
                },
            )
            return tx.jobs

    def due_timers(self, now: float, limit: int = 100) -> list[tuple[str, int]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(timers.c.run_id, timers.c.cmd)
                .where(timers.c.status == "pending", timers.c.fire_at <= now)
                .limit(limit)
            ).all()
        return [(r.run_id, r.cmd) for r in rows]

    def enforce_deadlines(self, now: float, limit: int = 100) -> list[Job]:
        with self.transaction() as tx:
            overdue = (
                tx.conn.execute(
                    select(runs.c.run_id)
                    .where(
                        runs.c.deadline_at < now,
                        runs.c.deadline_notified.is_(False),
                        runs.c.status.in_(OPEN_STATUSES),
                    )
                    .limit(limit)
                )
                .scalars()
                .all()
            )
            for run_id in overdue:
                tx.conn.execute(
                    update(runs).where(runs.c.run_id == run_id).values(deadline_notified=True)
                )
                tx.append_event(run_id, ev.DEADLINE_EXCEEDED, {"deadline_passed_at": now})
            return tx.jobs

    def lingering_jobs(self, older_than: float, limit: int = 500) -> list[Job]:
        """Outbox rows nobody consumed: the relay dispatches them again."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(outbox)
                .where(and_(outbox.c.created_at < older_than, outbox.c.not_before < older_than))
                .order_by(outbox.c.id)
                .limit(limit)
            ).all()
        return [Job(r.job_id, r.kind, r.ref, r.queue, r.not_before) for r in rows]

    def runnable_without_job(self, older_than: float, limit: int = 100) -> list[Job]:
        """Runs that wait for a workflow task but have no outbox row left."""
        with self.transaction() as tx:
            rows = tx.conn.execute(
                select(
                    runs.c.run_id,
                    runs.c.history_length,
                    runs.c.workflow_name,
                    runs.c.workflow_version,
                )
                .where(
                    runs.c.pending_task.is_(True),
                    runs.c.status.in_(OPEN_STATUSES),
                    runs.c.updated_at < older_than,
                )
                .limit(limit)
            ).all()
            for row in rows:
                queue = workflow_queue(row.workflow_name, row.workflow_version)
                tx.add_job(workflow_task_job(row.run_id, row.history_length, queue))
            return tx.jobs


def _lease_expiry(options: ActivityOptions, *, started_at: float, now: float) -> float:
    timeouts = options.timeouts
    expiry = started_at + timeouts.start_to_close
    if timeouts.heartbeat is not None:
        expiry = min(expiry, now + timeouts.heartbeat)
    return expiry


def _parse_ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()
