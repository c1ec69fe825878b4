"""Several writes of the hot path in one statement, on PostgreSQL.

A step's transaction used to send each of its writes as a statement of its
own: on PostgreSQL that is one round trip each, and each round trip costs
both processes a wake-up and SQLAlchemy its execution overhead (the census
in docs/history/benchmarks-2026-11.md, "Issue 12", counts them). Writes that always travel
together and whose later parts depend only on the first part's row are
sent here as one statement with data-modifying CTEs:

- a completion and its attempt's end (``COMPLETE_AND_FINISH``);
- a claim, its attempt's row and the consumed job (``CLAIM_AND_START``,
  ``CLAIM_ONLY_AND_START``);
- a scheduled activity inserted already claimed and its attempt's row
  (``SCHEDULE_CLAIMED``);
- a closed run's work stopped: its queued tasks cancelled, its running ones
  asked to stop, its timers cancelled and its jobs dropped (``STOP_RUN_WORK``);
- a run's start: its row, its ``workflow_started`` event and its first
  workflow task's job (``START_AND_QUEUE``).

Each later part reads the first part's ``RETURNING`` rows, so it writes
nothing when the first part matched nothing (a stale token, a task not due,
an operation id already taken): the statement does exactly what the
separate statements did in the same transaction, one round trip instead of
two or three. SQLite has no data-modifying CTEs, and its statements cost no
round trip, so it keeps the separate statements (``dialect_has_ctes``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Select,
    String,
    Update,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.dml import ReturningDelete

from app.engine import _history_commands as ev
from app.engine._jobs import WORKFLOW_TASK
from app.engine._store.schema import attempts, events, outbox, tasks
from app.engine._store.statements import (
    CANCEL_RUN_TIMERS,
    CLAIM,
    CLAIM_ONLY,
    COMPLETE_TASK,
    START_RUN,
    STOP_RUN_TASKS,
)


def dialect_has_ctes(conn: Connection) -> bool:
    """Whether ``conn``'s database takes INSERT/UPDATE/DELETE inside WITH."""
    return conn.dialect.name == "postgresql"


def _complete_and_finish() -> Select[Any]:
    done = COMPLETE_TASK.cte("done")
    finish = (
        attempts.update()
        .where(
            attempts.c.task_id == bindparam("p_task"),
            attempts.c.fencing_token == bindparam("p_token"),
            exists(select(done.c.run_id)),
        )
        .values(finished_at=bindparam("p_now"), outcome=bindparam("p_outcome"), error=None)
        .cte("finish")
    )
    return select(done).add_cte(finish)


#: ``COMPLETE_TASK`` and, when it matched, ``FINISH_ATTEMPT`` (no error).
COMPLETE_AND_FINISH: Select[Any] = _complete_and_finish()


def _claim_and_start(claim: Update) -> Select[Any]:
    claimed = claim.cte("claimed")
    start = insert(attempts).from_select(
        ["task_id", "attempt", "fencing_token", "worker_id", "code_version", "started_at"],
        select(
            bindparam("p_task", type_=attempts.c.task_id.type),
            claimed.c.attempt,
            claimed.c.fencing_token,
            bindparam("p_worker", type_=attempts.c.worker_id.type),
            bindparam("p_code", type_=attempts.c.code_version.type),
            bindparam("p_now", type_=attempts.c.started_at.type),
        ),
    )
    consumed = delete(outbox).where(
        outbox.c.kind == "activity",
        outbox.c.ref == bindparam("p_ref"),
        exists(select(claimed.c.run_id)),
    )
    return select(claimed).add_cte(start.cte("started")).add_cte(consumed.cte("consumed"))


#: ``CLAIM`` (or ``CLAIM_ONLY``), then the attempt's row and the consumed
#: activity job, as ``ActivityAttempts._claimed`` writes them.
CLAIM_AND_START: Select[Any] = _claim_and_start(CLAIM)
CLAIM_ONLY_AND_START: Select[Any] = _claim_and_start(CLAIM_ONLY)

#: The columns of a task row inserted already claimed (``EagerOffer``).
CLAIMED_TASK_COLUMNS = (
    "run_id",
    "cmd",
    "activity",
    "operation_id",
    "input",
    "input_hash",
    "options",
    "has_reconcile",
    "status",
    "scheduled_at",
    "next_attempt_at",
    "schedule_to_start_deadline",
    "schedule_to_close_deadline",
    "attempt",
    "fencing_token",
    "started_at",
    "heartbeat_at",
    "lease_expires_at",
    "worker_id",
    "code_version",
)


def _schedule_claimed() -> Select[Any]:
    scheduled = (
        pg_insert(tasks)
        .values({name: bindparam(f"t_{name}") for name in CLAIMED_TASK_COLUMNS})
        .on_conflict_do_nothing(index_elements=[tasks.c.operation_id])
        .returning(tasks.c.id)
        .cte("scheduled")
    )
    start = insert(attempts).from_select(
        ["task_id", "attempt", "fencing_token", "worker_id", "code_version", "started_at"],
        select(
            scheduled.c.id,
            literal(1),
            literal(1),
            bindparam("t_worker_id", type_=attempts.c.worker_id.type),
            bindparam("t_code_version", type_=attempts.c.code_version.type),
            bindparam("t_started_at", type_=attempts.c.started_at.type),
        ),
    )
    return select(scheduled.c.id).add_cte(start.cte("started"))


#: A task inserted as attempt 1 under token 1 and that attempt's row; no row
#: back (and nothing written) when its operation id is taken.
SCHEDULE_CLAIMED: Select[Any] = _schedule_claimed()


def _stop_run_work() -> ReturningDelete[Any, Any, Any]:
    run_id = bindparam("p_run", type_=String)
    stopped = STOP_RUN_TASKS.cte("stopped")
    cancelled = CANCEL_RUN_TIMERS.cte("cancelled_timers")
    # Every CTE reads the snapshot from before the statement: a task still
    # "scheduled" there is one ``stopped`` cancels, so the jobs of every task
    # that is not running go, as they do after the separate statements.
    not_running = select(cast(tasks.c.id, String)).where(
        tasks.c.run_id == run_id, tasks.c.status != "running"
    )
    timer_refs = select(run_id + "|" + cast(cancelled.c.cmd, String))
    stmt = (
        delete(outbox)
        .where(
            or_(
                (outbox.c.kind == "workflow_task") & (outbox.c.ref == run_id),
                (outbox.c.kind == "activity") & outbox.c.ref.in_(not_running),
                (outbox.c.kind == "timer") & outbox.c.ref.in_(timer_refs),
            )
        )
        .returning(outbox.c.job_id, outbox.c.queue, outbox.c.relays)
        .add_cte(stopped)
        .add_cte(cancelled)
    )
    return stmt


#: ``STOP_RUN_TASKS``, ``CANCEL_RUN_TIMERS`` and the drop of the run's jobs
#: (``Tx.stop_run_work``); returns the dropped jobs.
STOP_RUN_WORK: ReturningDelete[Any, Any, Any] = _stop_run_work()


def job_row_from(job_id: Any, kind: Any, ref: Any, queue: Any) -> Any:
    """An outbox row for a job due now, from the columns of the rows another
    part of the statement returns, as ``Tx.add_job`` writes it: created and
    relayable at ``p_now``, never relayed; a second write of its job id is a
    no-op (``ADD_JOB``)."""
    now = bindparam("p_now", type_=Float)
    return (
        pg_insert(outbox)
        .from_select(
            ["job_id", "kind", "ref", "queue", "not_before", "created_at", "relays", "relay_at"],
            select(job_id, kind, ref, queue, literal(0.0), now, literal(0), now),
            include_defaults=False,
        )
        .on_conflict_do_nothing()
    )


def _start_and_queue() -> Select[Any]:
    started = START_RUN["postgresql"].cte("started")
    now = bindparam("p_now", type_=Float)
    logged = insert(events).from_select(
        ["run_id", "seq", "type", "data", "created_at"],
        select(
            started.c.run_id,
            literal(1),
            literal(ev.WORKFLOW_STARTED),
            bindparam("p_started", type_=events.c.data.type),
            now,
        ),
    )
    # ``workflow_task_job(run_id, 1, queue)``, as ``Tx.add_job`` writes it.
    queued = job_row_from(
        func.concat("wft:", started.c.run_id, ":1"),
        literal(WORKFLOW_TASK),
        started.c.run_id,
        bindparam("p_queue", type_=String),
    )
    return select(started.c.run_id).add_cte(logged.cte("logged"), queued.cte("queued"))


#: ``START_RUN`` (PostgreSQL) with its first event and its first workflow
#: task's job: the new run's id, or no row (and nothing written) when a run
#: is active for the workflow id.
START_AND_QUEUE: Select[Any] = _start_and_queue()


def schedule_claimed_params(row: dict[str, Any]) -> dict[str, Any]:
    """``SCHEDULE_CLAIMED``'s parameters from the task row's columns."""
    return {f"t_{name}": row[name] for name in CLAIMED_TASK_COLUMNS}
