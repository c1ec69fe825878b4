"""One transaction and the operations clients run inside it (start, signal, cancel, terminate)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, String, cast, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.engine import _history_commands as ev
from app.engine._jobs import Job, retractions, workflow_queue, workflow_task_job
from app.engine._store.combined import START_AND_QUEUE, STOP_RUN_WORK, dialect_has_ctes
from app.engine._store.rows import RunRow, StartResult, run_row
from app.engine._store.schema import counters, outbox, runs, signals, tasks
from app.engine._store.statements import (
    ADD_JOB,
    BUMP_HISTORY,
    CANCEL_RUN_TIMERS,
    INSERT_EVENT,
    START_RUN,
    STOP_RUN_TASKS,
    one_of,
)
from app.engine._tables import (
    OPEN_STATUSES,
    PARKED_STATUSES,
    WAITING_FOR_OPERATOR,
)


def closing_values(status: str, result: Any, error: Any, now: float) -> dict[str, Any]:
    """The run row's columns once it ends (or parks) with ``status``: a parked
    run keeps its workflow id (its active key) and is not closed."""
    values: dict[str, Any] = {
        "status": status,
        "result": result,
        "error": error,
        "pending_task": False,
        "updated_at": now,
    }
    if status not in PARKED_STATUSES:
        values |= {"active_key": None, "closed_at": now}
    return values


@dataclass
class Tx:
    """One transaction plus the jobs it wrote, to dispatch after commit."""

    conn: Connection
    now: float
    jobs: list[Job] = field(default_factory=list)
    #: Events written together by ``flush_events`` (one statement, not one each).
    deferred_events: list[dict[str, Any]] = field(default_factory=list)

    # -- outbox ----------------------------------------------------------------

    def add_job(self, job: Job) -> None:
        values = {
            "job_id": job.job_id,
            "kind": job.kind,
            "ref": job.ref,
            "queue": job.queue,
            "not_before": job.not_before,
            "created_at": self.now,
            "relay_at": max(self.now, job.not_before),
        }
        self.conn.execute(ADD_JOB[self.conn.dialect.name], values)
        self.jobs.append(job)

    def drop_jobs(self, condition: ColumnElement[bool]) -> None:
        """Delete the outbox rows matching ``condition`` (work that is no longer
        due) and ask the channel, after commit, to drop their delayed jobs."""
        dropped = self.conn.execute(
            delete(outbox)
            .where(condition)
            .returning(outbox.c.job_id, outbox.c.queue, outbox.c.relays)
        ).all()
        self._retract(dropped)

    def _retract(self, dropped: Sequence[Any]) -> None:
        """After commit, the channel drops the delayed jobs of these outbox rows."""
        for row in dropped:
            self.jobs.extend(retractions(row.job_id, row.queue, row.relays))

    # -- history ---------------------------------------------------------------

    def append_event(self, run_id: str, type_: str, data: dict[str, Any]) -> int | None:
        """Append an event from outside the workflow task; None if the run is not open."""
        row = self.conn.execute(BUMP_HISTORY, {"p_run": run_id, "p_now": self.now}).first()
        if row is None:
            return None
        seq = int(row.history_length)
        self.insert_event(run_id, seq, type_, data)
        queue = workflow_queue(row.workflow_name, row.workflow_version)
        self.add_job(workflow_task_job(run_id, seq, queue))
        return seq

    def insert_event(self, run_id: str, seq: int, type_: str, data: dict[str, Any]) -> None:
        """Write the event at ``seq`` (the caller has claimed that position)."""
        self.defer_event(run_id, seq, type_, data)
        self.flush_events()

    def defer_event(self, run_id: str, seq: int, type_: str, data: dict[str, Any]) -> None:
        """Write the event at ``seq`` with the others of this transaction, at
        the next ``flush_events`` (the store flushes before every commit). A
        workflow task's events go together: one round trip, not one each."""
        row = {"run_id": run_id, "seq": seq, "type": type_, "data": data, "created_at": self.now}
        self.deferred_events.append(row)

    def flush_events(self) -> None:
        if self.deferred_events:
            rows, self.deferred_events = self.deferred_events, []
            self.conn.execute(INSERT_EVENT, rows)

    # -- client operations (usable inside a caller's transaction) -------------

    def active_run(self, workflow_id: str) -> RunRow | None:
        row = self.conn.execute(select(runs).where(runs.c.active_key == workflow_id)).first()
        return run_row(row) if row else None

    def newest_run(self, workflow_id: str) -> RunRow | None:
        """The newest run of ``workflow_id``, open or closed."""
        row = self.conn.execute(
            select(runs)
            .where(runs.c.workflow_id == workflow_id)
            .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
            .limit(1)
        ).first()
        return run_row(row) if row else None

    def target(self, key: str) -> RunRow | None:
        """The open or parked run that ``key`` names: a run id (only while that
        very run is the active one) or a workflow id (its active run)."""
        row = self.conn.execute(select(runs).where(runs.c.run_id == key)).first()
        if row is not None:
            return run_row(row) if row.active_key is not None else None
        return self.active_run(key)

    def record_event(self, run: RunRow, type_: str, data: dict[str, Any]) -> int:
        """Append an event whatever the run's status (no workflow task follows)."""
        seq = int(
            self.conn.execute(
                update(runs)
                .where(runs.c.run_id == run.run_id)
                .values(history_length=runs.c.history_length + 1, updated_at=self.now)
                .returning(runs.c.history_length)
            ).scalar_one()
        )
        self.insert_event(run.run_id, seq, type_, data)
        return seq

    def has_run(self, workflow_id: str) -> bool:
        """Whether any run, open or closed, ever had ``workflow_id``."""
        return (
            self.conn.execute(
                select(runs.c.run_id).where(runs.c.workflow_id == workflow_id).limit(1)
            ).first()
            is not None
        )

    def start_run(
        self,
        *,
        workflow_name: str,
        workflow_version: int,
        workflow_id: str,
        input: Any,
        deadline_seconds: float | None = None,
        continued_from: str | None = None,
        operator: dict[str, Any] | None = None,
    ) -> StartResult:
        """Start a run unless one is active for ``workflow_id`` (then return it).

        ``operator``: who started it by hand and why (recorded in history)."""
        params = {
            "p_workflow_id": workflow_id,
            "p_name": workflow_name,
            "p_version": workflow_version,
            "p_input": input,
            "p_deadline": self.now + deadline_seconds if deadline_seconds else None,
            "p_continued_from": continued_from,
            "p_now": self.now,
        }
        started = {
            "input": input,
            "workflow": workflow_name,
            "version": workflow_version,
            "workflow_id": workflow_id,
        }
        if operator:
            started["operator"] = operator
        queue = workflow_queue(workflow_name, workflow_version)
        if dialect_has_ctes(self.conn):
            # The run, its first event and its job in one statement.
            whole = params | {"p_started": started, "p_queue": queue}
            run_id = self.conn.execute(START_AND_QUEUE, whole).scalar()
            if run_id is not None:
                self.jobs.append(workflow_task_job(run_id, 1, queue))
        else:
            run_id = self.conn.execute(START_RUN[self.conn.dialect.name], params).scalar()
            if run_id is not None:
                self.insert_event(run_id, 1, ev.WORKFLOW_STARTED, started)
                self.add_job(workflow_task_job(run_id, 1, queue))
        if run_id is not None:
            return StartResult(run_id, created=True)
        active = self.active_run(workflow_id)
        if active is None:
            # A concurrent start took this run number, and its run has
            # closed already: nothing to report as the active run.
            raise RuntimeError(f"a concurrent start of {workflow_id!r} took its run number")
        return StartResult(active.run_id, created=False)

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

    def request_cancel(self, key: str, reason: str, *, by: str | None = None) -> bool:
        """Ask the run ``key`` names (run id or workflow id) to cancel; ``by``
        (who acted) is recorded with the reason in history."""
        run = self.target(key)
        if run is None:
            return False
        data: dict[str, Any] = {"reason": reason} | ({"by": by} if by else {})
        waiting = isinstance(run.error, dict) and run.error.get("type") == WAITING_FOR_OPERATOR
        if run.status in PARKED_STATUSES and not waiting:
            # Parked runs run no code: close them as cancelled straight away.
            self.record_event(run, ev.CANCEL_REQUESTED, data)
            self.close_run(run.run_id, "cancelled", error=data)
            return True
        moved = self.conn.execute(
            update(runs)
            .where(runs.c.run_id == run.run_id, runs.c.status.in_(("running", "needs-human")))
            .values(
                status="cancelling",
                cancel_phase="cancel-requested",
                cancel_reason=reason,
                error=None,
            )
        ).rowcount
        if not moved:
            return False
        return self.append_event(run.run_id, ev.CANCEL_REQUESTED, data) is not None

    def terminate(self, key: str, reason: str, *, by: str | None = None) -> dict[str, Any] | None:
        """End the active run now, without running workflow code; report what is uncertain."""
        run = self.target(key)
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
        record: dict[str, Any] = {"reason": reason, "uncertain": uncertain}
        if by:
            record["by"] = by
        self.record_event(run, ev.WORKFLOW_TERMINATED, record)
        self.close_run(run.run_id, "terminated", error=record)
        return record

    def close_run(self, run_id: str, status: str, *, result: Any = None, error: Any = None) -> None:
        values = closing_values(status, result, error, self.now)
        self.conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))
        if status not in PARKED_STATUSES:
            self.stop_run_work(run_id)

    def stop_run_work(self, run_id: str) -> None:
        """After the run's row closed: nothing may keep running for it. Queued
        tasks are cancelled, running ones asked to stop (their next heartbeat
        reads it), timers cancelled, and no outbox row or delayed job may
        outlive the run."""
        params = {"p_run": run_id, "p_now": self.now}
        if dialect_has_ctes(self.conn):
            self._retract(self.conn.execute(STOP_RUN_WORK, params).all())
            return
        self.conn.execute(STOP_RUN_TASKS, params)
        cancelled_timers = self.conn.execute(CANCEL_RUN_TIMERS, params).scalars()
        closed_tasks = select(cast(tasks.c.id, String)).where(
            tasks.c.run_id == run_id, one_of(tasks.c.status, ("cancelled", "failed", "completed"))
        )
        left = ((outbox.c.kind == "workflow_task") & (outbox.c.ref == run_id)) | (
            (outbox.c.kind == "activity") & outbox.c.ref.in_(closed_tasks)
        )
        refs = [f"{run_id}|{cmd}" for cmd in cancelled_timers]
        if refs:
            left |= (outbox.c.kind == "timer") & outbox.c.ref.in_(refs)
        self.drop_jobs(left)

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
