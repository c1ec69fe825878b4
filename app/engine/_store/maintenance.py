"""Timers and the reconciler's queries (all indexed; none scans every run)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import exists, select, update

from app.engine import _history_commands as ev
from app.engine._jobs import Job, workflow_queue, workflow_task_job
from app.engine._policy import ActivityOptions
from app.engine._store.base import StoreBase
from app.engine._store.rows import Failure, Lingering
from app.engine._store.schema import EARLY_TOLERANCE, outbox, runs, tasks, timers
from app.engine._tables import (
    OPEN_STATUSES,
)

#: The longest wait between two re-dispatches of the same outbox row.
MAX_RELAY_BACKOFF = 30.0


class Maintenance(StoreBase):
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
            # Fired by the reconciler, its delayed job is still in the channel: drop it.
            tx.drop_jobs((outbox.c.kind == "timer") & (outbox.c.ref == f"{run_id}|{cmd}"))
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

    def lingering_jobs(self, now: float, *, grace: float, limit: int = 500) -> list[Lingering]:
        """Outbox rows nobody consumed within ``grace`` of falling due (or of the
        relay's last look), oldest look first, each with the job it was last
        sent as. Only reads: :meth:`relay_lingering` decides, once the channel
        has said which of these jobs are merely waiting in it."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(outbox)
                .where(outbox.c.relay_at < now - grace)
                .order_by(outbox.c.relay_at)
                .limit(limit)
            ).all()
        return [
            Lingering(
                r.id,
                r.relays,
                max(r.created_at, r.not_before),
                Job(r.job_id, r.kind, r.ref, r.queue),
            )
            for r in rows
        ]

    def relay_lingering(
        self, rows: Sequence[Lingering], now: float, *, grace: float, waiting: Collection[str]
    ) -> list[Job]:
        """Dispatch again the rows whose last job is not in ``waiting``, each
        time under a fresh job id (a crashed worker may have left the old id
        locked in arq) and with a longer wait before the next time. A row whose
        job is merely waiting for a worker is not sent again (a copy would only
        queue behind it and cost a dequeue and an empty claim): the relay looks
        at it again after as long as it has waited so far, at most
        :data:`MAX_RELAY_BACKOFF`, which bounds how late a job that a worker
        takes and then dies holding is re-sent."""
        with self.transaction() as tx:
            for row in rows:
                if row.last_sent.job_id in waiting:
                    relay, wait = row.relays, min(MAX_RELAY_BACKOFF, max(grace, now - row.due))
                else:
                    relay = row.relays + 1
                    wait = min(MAX_RELAY_BACKOFF, grace * 2**relay)
                taken = tx.conn.execute(
                    update(outbox)
                    .where(outbox.c.id == row.row_id, outbox.c.relays == row.relays)
                    .values(relays=relay, relay_at=now + wait - grace)
                ).rowcount
                # Not taken: consumed meanwhile, or another reconciler relayed it just now.
                if taken and relay != row.relays:
                    tx.jobs.append(row.sent_as(relay))
            return tx.jobs

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
                    # A run with a workflow-task row left is the relay's business.
                    ~exists().where(
                        outbox.c.kind == "workflow_task", outbox.c.ref == runs.c.run_id
                    ),
                )
                .limit(limit)
            ).all()
            for row in rows:
                queue = workflow_queue(row.workflow_name, row.workflow_version)
                tx.add_job(workflow_task_job(row.run_id, row.history_length, queue))
            return tx.jobs
