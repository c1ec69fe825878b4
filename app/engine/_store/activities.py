"""Activity attempts: claim with a fencing token, heartbeat, complete, fail, park."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import case, func, insert, or_, select, update

from app.engine import _history_commands as ev
from app.engine._errors import StaleLease
from app.engine._jobs import Job, activity_job
from app.engine._policy import ActivityOptions
from app.engine._store.base import StoreBase
from app.engine._store.combined import (
    CLAIM_AND_START,
    CLAIM_ONLY_AND_START,
    COMPLETE_AND_FINISH,
    dialect_has_ctes,
)
from app.engine._store.eager import start_attempt
from app.engine._store.rows import Claim, Failure
from app.engine._store.schema import (
    EARLY_TOLERANCE,
    STALE_WRITES,
    attempts,
    events,
    lease_expiry,
    runs,
    tasks,
)
from app.engine._store.statements import (
    CLAIM,
    CLAIM_ONLY,
    COMPLETE_TASK,
    DROP_ACTIVITY_JOBS,
    FINISH_ATTEMPT,
    HEARTBEAT_READ,
    HEARTBEAT_WRITE,
)
from app.engine._store.tx import Tx
from app.engine._tables import (
    OPEN_STATUSES,
)

#: Longest wait a service may ask for (``next_retry_delay``) that is not
#: counted against schedule-to-close; a longer one fails the activity as usual.
MAX_EXCUSED_DELAY = 6 * 3600.0


def excused_deadline(deadline: float, now: float, requested: float) -> float:
    """Schedule-to-close bounds our own trying, not the time a service told us to
    wait (GitHub's rate-limit reset may lie an hour away): a requested wait that
    would end past the deadline moves the deadline back by that wait. The retry
    is a durable scheduled attempt, so no worker is held meanwhile."""
    if requested > MAX_EXCUSED_DELAY or now + requested < deadline:
        return deadline
    return deadline + requested


class ActivityAttempts(StoreBase):
    def claim_activity(
        self,
        task_id: int,
        *,
        worker_id: str,
        code_version: str,
        can_run: Collection[str] | None = None,
    ) -> Claim | None:
        """Take the next attempt of a scheduled task, or None if there is none to
        take. A worker without the activity's code (``can_run``) leaves it, and
        its job, for a worker that has it (or for its schedule-to-start timeout)."""
        if self.engine.dialect.name == "postgresql":
            # The claim, its attempt's row and the consumed job in one
            # statement, sent on its own: one round trip.
            with self.one_statement() as tx:
                params = _claim_params(tx, task_id, worker_id, code_version, can_run)
                params["p_ref"] = str(task_id)
                both = CLAIM_AND_START if can_run is None else CLAIM_ONLY_AND_START
                row = tx.conn.execute(both, params).first()
                return None if row is None else self._claim_of(tx, task_id, row)
        with self.transaction() as tx:
            params = _claim_params(tx, task_id, worker_id, code_version, can_run)
            row = tx.conn.execute(CLAIM if can_run is None else CLAIM_ONLY, params).first()
            if row is None:
                return None
            return self._claimed(tx, task_id, row, worker_id, code_version)

    def _claimed(self, tx: Tx, task_id: int, row: Any, worker_id: str, code_version: str) -> Claim:
        """Record the attempt a claim took (its row, the consumed job) and hand it out."""
        start_attempt(tx, task_id, row.attempt, row.fencing_token, worker_id, code_version)
        tx.conn.execute(DROP_ACTIVITY_JOBS, {"p_ref": str(task_id)})
        return self._claim_of(tx, task_id, row)

    @staticmethod
    def _claim_of(tx: Tx, task_id: int, row: Any) -> Claim:
        """The attempt a claim's row describes, as the worker runs it."""
        return Claim(
            task_id=task_id,
            run_id=row.run_id,
            cmd=row.cmd,
            workflow_id=row.workflow_id,
            activity=row.activity,
            operation_id=row.operation_id,
            input=row.input,
            attempt=row.attempt,
            token=row.fencing_token,
            needs_reconcile=bool(row.needs_reconcile),
            options=ActivityOptions.from_json(row.options),
            started_at=tx.now,
            heartbeat_details=row.heartbeat_details,
        )

    def held_token(self, task_id: int, worker_id: str) -> int | None:
        """The token of the running attempt of ``task_id`` if ``worker_id`` holds it."""
        with self.reading() as conn:
            token = conn.execute(
                select(tasks.c.fencing_token).where(
                    tasks.c.id == task_id,
                    tasks.c.status == "running",
                    tasks.c.worker_id == worker_id,
                )
            ).scalar()
        return int(token) if token is not None else None

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
            row = tx.conn.execute(HEARTBEAT_READ, {"p_task": task_id, "p_token": token}).first()
            if row is None:
                self._reject_stale(tx, task_id, token, "heartbeat")
                return None
            options = ActivityOptions.from_json(row.options)
            lease = lease_expiry(options, started_at=row.started_at, now=tx.now)
            tx.conn.execute(
                HEARTBEAT_WRITE,
                {
                    "p_task": task_id,
                    "p_token": token,
                    "p_now": tx.now,
                    "p_details": details,
                    "p_lease": lease,
                },
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
            row = self._accept_result(tx, task_id, token, result, outcome)
            if row is None:
                return None
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
            # FOR UPDATE: two reconciler passes at once (every worker runs one,
            # and a starting worker's first pass may overlap its loop's) must
            # not both read the attempt running and both record its failure;
            # the second waits, then finds it ended.
            row = tx.conn.execute(
                select(tasks)
                .where(
                    tasks.c.id == task_id,
                    tasks.c.fencing_token == token,
                    tasks.c.status == "running",
                )
                .with_for_update()
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
            if failure.next_retry_delay is not None and deadline is not None:
                deadline = excused_deadline(deadline, tx.now, failure.next_retry_delay)
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
                        schedule_to_close_deadline=deadline,
                        needs_reconcile=failure.failure_class == "ambiguous",
                        last_failure=failure.to_json(),
                        lease_expires_at=None,
                    )
                )
                tx.add_job(
                    activity_job(task_id, row.attempt + 1, tx.now + delay, activity=row.activity)
                )
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
            tx.close_run(row.run_id, "needs-human", error=record)

    def _accept_result(
        self, tx: Tx, task_id: int, token: int, result: Any, outcome: str
    ) -> Any | None:
        """Complete the task with ``result`` and end its attempt with ``outcome``,
        if ``token`` is current: the task's row (run, command, activity,
        attempt, worker, code version). None, with the stale write counted,
        when it is not."""
        params = {"p_task": task_id, "p_token": token, "p_result": result, "p_now": tx.now}
        if dialect_has_ctes(tx.conn):
            row = tx.conn.execute(COMPLETE_AND_FINISH, params | {"p_outcome": outcome}).first()
        else:
            row = tx.conn.execute(COMPLETE_TASK, params).first()
            if row is not None:
                self._finish_attempt(tx, task_id, token, outcome, None)
        if row is None:
            self._reject_stale(tx, task_id, token, "completion")
        return row

    def _finish_attempt(
        self, tx: Tx, task_id: int, token: int, outcome: str, failure: Failure | None
    ) -> None:
        tx.conn.execute(
            FINISH_ATTEMPT,
            {
                "p_task": task_id,
                "p_token": token,
                "p_now": tx.now,
                "p_outcome": outcome,
                "p_error": failure.to_json() if failure else None,
            },
        )

    def _reject_stale(self, tx: Tx, task_id: int, token: int, what: str) -> None:
        tx.bump_counter(STALE_WRITES)
        # A stale attempt has usually ended already (its lease expired and the
        # reconciler recorded that): keep that outcome and add the refused late
        # write to it, once, so the attempt's record shows the stale worker.
        stale = f"stale-{what}-rejected"
        tx.conn.execute(
            update(attempts)
            .where(
                attempts.c.task_id == task_id,
                attempts.c.fencing_token == token,
                or_(attempts.c.outcome.is_(None), attempts.c.outcome.not_like(f"%{stale}%")),
            )
            .values(
                outcome=case(
                    (attempts.c.outcome.is_(None), stale),
                    else_=attempts.c.outcome + f"; {stale}",
                ),
                finished_at=func.coalesce(attempts.c.finished_at, tx.now),
            )
        )


def _claim_params(
    tx: Tx, task_id: int, worker_id: str, code_version: str, can_run: Collection[str] | None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "p_task": task_id,
        "p_due": tx.now + EARLY_TOLERANCE,
        "p_now": tx.now,
        "p_worker": worker_id,
        "p_code": code_version,
    }
    if can_run is not None:
        params["p_can_run"] = list(can_run)
    return params
