"""The hot path's statements, built once.

Building a SQLAlchemy expression per call (``insert(t).values(**row)``,
``update(t).where(...).values(...)``) coerces every value into a bound
parameter and computes a cache key before the compiled form is found: that
was two thirds of the runtime's CPU per step (docs/history/benchmarks-2026-11.md, "Where the
time goes"). These statements are built at import with ``bindparam()``; a call
only supplies the parameters, and SQLAlchemy reuses the compiled SQL.

Parameter names carry a ``p_`` prefix: SQLAlchemy reserves a column's own
name for the value of that column in INSERT/UPDATE.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Float,
    Insert,
    Select,
    String,
    Update,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.engine._store.schema import attempts, events, outbox, runs, tasks, timers
from app.engine._tables import OPEN_STATUSES


def _per_dialect(pg: Any, sqlite: Any) -> dict[str, Any]:
    return {"postgresql": pg, "sqlite": sqlite}


def one_of(column: ColumnElement[Any], values: Iterable[Any]) -> Any:
    """``column IN (...)`` over constants, rendered once, when the statement is
    compiled.

    ``column.in_(values)`` binds the values as one *expanding* parameter: the
    compiled SQL keeps a placeholder that SQLAlchemy rewrites on **every**
    execution, even when the compiled form came from its cache: a pass over
    the whole SQL string and the parameters, for the guard, the one-statement
    steps and closes and ``LOAD_TASK`` (docs/benchmarks.md, "Compiled
    statements"). A list of bound literals is rendered into the compiled SQL
    instead; what is sent is the same, one bound parameter per value. Only
    for a fixed list: a caller-sized one (``p_can_run``) stays expanding, one
    cache entry for any length."""
    items = [literal(value, column.type) for value in values]
    return column.in_(items)


# -- outbox ---------------------------------------------------------------------

#: A job's row; a second write of the same job id is a no-op.
ADD_JOB: dict[str, Insert] = _per_dialect(
    pg_insert(outbox).on_conflict_do_nothing(),
    sqlite_insert(outbox).on_conflict_do_nothing(),
)

#: The job that brought a workflow task (or its duplicates) is consumed.
DROP_WORKFLOW_TASK_JOBS: Delete = delete(outbox).where(
    outbox.c.kind == "workflow_task", outbox.c.ref == bindparam("p_ref")
)

#: The job that brought an activity attempt is consumed.
DROP_ACTIVITY_JOBS: Delete = delete(outbox).where(
    outbox.c.kind == "activity", outbox.c.ref == bindparam("p_ref")
)

# -- history --------------------------------------------------------------------

INSERT_EVENT: Insert = insert(events)

#: Claim the next history position of an open run for an event from outside
#: the workflow task, and mark a workflow task due.
BUMP_HISTORY: Update = (
    runs.update()
    .where(runs.c.run_id == bindparam("p_run"), one_of(runs.c.status, OPEN_STATUSES))
    .values(
        history_length=runs.c.history_length + 1,
        pending_task=True,
        updated_at=bindparam("p_now"),
    )
    .returning(runs.c.history_length, runs.c.workflow_name, runs.c.workflow_version)
)

LOAD_RUN: Select[Any] = select(runs).where(runs.c.run_id == bindparam("p_run"))


def _start_run(dialect_insert: Any) -> Insert:
    workflow_id = bindparam("p_workflow_id", type_=String)
    number = (
        select(func.count() + 1)
        .select_from(runs)
        .where(runs.c.workflow_id == workflow_id)
        .scalar_subquery()
    )
    stmt: Insert = (
        dialect_insert(runs)
        .values(
            run_id=workflow_id + "/" + cast(number, String),
            workflow_id=workflow_id,
            active_key=workflow_id,
            workflow_name=bindparam("p_name"),
            workflow_version=bindparam("p_version"),
            status="running",
            input=bindparam("p_input", type_=runs.c.input.type),
            history_length=1,
            pending_task=True,
            deadline_at=bindparam("p_deadline", type_=Float),
            # Given, not left to the column's Python-side default: that would
            # be a parameter nobody fills inside a CTE (``START_AND_QUEUE``).
            deadline_notified=False,
            continued_from=bindparam("p_continued_from", type_=String),
            created_at=bindparam("p_now", type_=Float),
            updated_at=bindparam("p_now", type_=Float),
        )
        # Taken: a run is active for this workflow id (its unique active key),
        # or a concurrent start took the same run number. No row comes back.
        .on_conflict_do_nothing()
        .returning(runs.c.run_id)
    )
    return stmt


#: A new run, numbered after the workflow id's earlier runs (``<id>/<n>``),
#: unless one is active for the workflow id: then nothing is written.
START_RUN: dict[str, Insert] = _per_dialect(_start_run(pg_insert), _start_run(sqlite_insert))


def _load_task() -> Select[Any]:
    new_events = (
        select(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_object(
                        "seq", events.c.seq, "type", events.c.type, "data", events.c.data
                    ),
                    events.c.seq,
                )
            )
        )
        .where(
            events.c.run_id == runs.c.run_id,
            events.c.seq > bindparam("p_after"),
            events.c.seq <= runs.c.history_length,
            one_of(runs.c.status, OPEN_STATUSES),
        )
        .scalar_subquery()
    )
    return select(runs, new_events.label("new_events")).where(runs.c.run_id == bindparam("p_run"))


#: PostgreSQL: the run and, while it is open, its events after ``p_after``
#: up to its history length (``new_events``: a JSON array in order, or
#: NULL), in one statement and so from one snapshot (``Reads.load_task``).
LOAD_TASK: Select[Any] = _load_task()

LOAD_EVENTS: Select[Any] = (
    select(events.c.seq, events.c.type, events.c.data)
    .where(events.c.run_id == bindparam("p_run"), events.c.seq > bindparam("p_after"))
    .order_by(events.c.seq)
)

# -- workflow task commit -------------------------------------------------------

_scheduled = tasks.c.status == "scheduled"

#: A closing run's tasks, in one statement: queued ones are cancelled, running
#: ones are asked to stop (their next heartbeat reads it).
STOP_RUN_TASKS: Update = (
    tasks.update()
    .where(tasks.c.run_id == bindparam("p_run"), one_of(tasks.c.status, ("scheduled", "running")))
    .values(
        status=case((_scheduled, "cancelled"), else_=tasks.c.status),
        closed_at=case((_scheduled, bindparam("p_now", type_=Float)), else_=tasks.c.closed_at),
        cancel_requested=case((_scheduled, tasks.c.cancel_requested), else_=True),
    )
)

#: A closing run's pending timers are cancelled; their commands come back.
CANCEL_RUN_TIMERS: Update = (
    timers.update()
    .where(timers.c.run_id == bindparam("p_run"), timers.c.status == "pending")
    .values(status="cancelled")
    .returning(timers.c.cmd)
)

#: The optimistic-concurrency guard of a workflow task in its common form (no
#: cancel phase, no park): it moves only from the history length replayed.
_GUARDED: Update = runs.update().where(
    runs.c.run_id == bindparam("p_run"),
    runs.c.history_length == bindparam("p_expected"),
    one_of(runs.c.status, OPEN_STATUSES),
)

GUARDED_COMMIT: Update = _GUARDED.values(
    history_length=bindparam("p_length"),
    pending_task=False,
    updated_at=bindparam("p_now"),
)


#: ``GUARDED_COMMIT`` for a workflow task that ends the run (no cancel phase,
#: not parked): the run's row closes in the same statement.
GUARDED_CLOSE: Update = _GUARDED.values(
    history_length=bindparam("p_length"),
    pending_task=False,
    updated_at=bindparam("p_now"),
    status=bindparam("p_status"),
    # Not ``p_result``: a close fused with a completion (``_store/closing.py``)
    # binds that to the activity's result.
    result=bindparam("p_run_result"),
    error=bindparam("p_run_error"),
    active_key=None,
    closed_at=bindparam("p_now"),
)


def _schedule(dialect_insert: Any) -> Insert:
    # The unique operation id decides: a reused one inserts nothing and returns
    # no row, and only then does the caller look at the existing task.
    stmt: Insert = (
        dialect_insert(tasks)
        .on_conflict_do_nothing(index_elements=[tasks.c.operation_id])
        .returning(tasks.c.id)
    )
    return stmt


SCHEDULE_ACTIVITY: dict[str, Insert] = _per_dialect(_schedule(pg_insert), _schedule(sqlite_insert))

TASK_BY_OPERATION: Select[Any] = select(tasks).where(
    tasks.c.operation_id == bindparam("p_operation")
)

# -- activity attempts ----------------------------------------------------------

_start_to_close = tasks.c.options[("timeouts", "start_to_close")].as_float()
_heartbeat_timeout = tasks.c.options[("timeouts", "heartbeat")].as_float()
_now = bindparam("p_now", type_=Float)


def _claim(only: bool) -> Update:
    due = [
        tasks.c.id == bindparam("p_task"),
        tasks.c.status == "scheduled",
        tasks.c.next_attempt_at <= bindparam("p_due"),
    ]
    if only:
        due.append(tasks.c.activity.in_(bindparam("p_can_run", expanding=True)))
    lease = case(
        (
            _heartbeat_timeout.is_not(None) & (_heartbeat_timeout < _start_to_close),
            _heartbeat_timeout,
        ),
        else_=_start_to_close,
    )
    claim: Update = (
        tasks.update()
        .where(*due)
        .values(
            status="running",
            attempt=tasks.c.attempt + 1,
            fencing_token=tasks.c.fencing_token + 1,
            started_at=_now,
            heartbeat_at=_now,
            lease_expires_at=_now + lease,
            worker_id=bindparam("p_worker"),
            code_version=bindparam("p_code"),
        )
        .returning(
            tasks.c.run_id,
            tasks.c.cmd,
            select(runs.c.workflow_id)
            .where(runs.c.run_id == tasks.c.run_id)
            .scalar_subquery()
            .label("workflow_id"),
            tasks.c.activity,
            tasks.c.operation_id,
            tasks.c.input,
            tasks.c.options,
            tasks.c.attempt,
            tasks.c.fencing_token,
            tasks.c.needs_reconcile,
            tasks.c.heartbeat_details,
        )
    )
    return claim


#: Take the next attempt of a due, scheduled task in one statement: the
#: fencing token grows, the lease is set from the task's own timeouts (the
#: heartbeat timeout when it is the shorter, as ``lease_expiry`` computes),
#: and the row comes back. No row: nothing to take (not scheduled, not due,
#: or, for ``CLAIM_ONLY``, not an activity in ``p_can_run``).
CLAIM: Update = _claim(only=False)
CLAIM_ONLY: Update = _claim(only=True)

INSERT_ATTEMPT: Insert = insert(attempts)

#: Accept an attempt's result from the current token holder only.
COMPLETE_TASK: Update = (
    tasks.update()
    .where(
        tasks.c.id == bindparam("p_task"),
        tasks.c.fencing_token == bindparam("p_token"),
        tasks.c.status == "running",
    )
    .values(status="completed", result=bindparam("p_result"), closed_at=bindparam("p_now"))
    .returning(
        tasks.c.run_id,
        tasks.c.cmd,
        tasks.c.activity,
        tasks.c.attempt,
        tasks.c.worker_id,
        tasks.c.code_version,
    )
)

FINISH_ATTEMPT: Update = (
    attempts.update()
    .where(
        attempts.c.task_id == bindparam("p_task"),
        attempts.c.fencing_token == bindparam("p_token"),
    )
    .values(
        finished_at=bindparam("p_now"),
        outcome=bindparam("p_outcome"),
        error=bindparam("p_error"),
    )
)

HEARTBEAT_READ: Select[Any] = select(
    tasks.c.options, tasks.c.started_at, tasks.c.cancel_requested
).where(
    tasks.c.id == bindparam("p_task"),
    tasks.c.fencing_token == bindparam("p_token"),
    tasks.c.status == "running",
)

HEARTBEAT_WRITE: Update = (
    tasks.update()
    .where(tasks.c.id == bindparam("p_task"), tasks.c.fencing_token == bindparam("p_token"))
    .values(
        heartbeat_at=bindparam("p_now"),
        heartbeat_details=bindparam("p_details"),
        lease_expires_at=bindparam("p_lease"),
    )
)
