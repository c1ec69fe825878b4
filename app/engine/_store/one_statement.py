"""The steady fused step as one statement on its own, on PostgreSQL.

A steady step (an activity's result whose workflow task schedules exactly
one next activity) wrote four statements in one transaction: the completion
with its attempt's end, the history-length guard, the next activity (inserted
already claimed with its attempt row, or queued with its outbox row), and
the two events. On PostgreSQL that is six round trips with
``BEGIN`` and ``COMMIT``. ``FUSED_STEP_*`` write all of it in **one**
statement with data-modifying CTEs, sent in autocommit: the statement is its
own transaction, so the step costs one round trip (the floor).

Each part writes only when the one before it matched (the guard only for a
current token, the schedule and the events only when the guard moved the
run), and the statement fails, writing nothing, in the one case where a part
matched and a later one did not: the completion was accepted but the run's
history moved (a signal, a cancel, another result) or the operation id was
taken. PostgreSQL has no ``RAISE`` in plain SQL, so the failure is a cast
of a marked text to an integer; it is built from the completed row, so the
planner cannot fold it into a constant and fail every statement. The caller
(``FusedSteps.complete_and_continue``) then takes the transaction of
separate statements, which handles those cases (and a stale token, where
nothing here matched) as it always did.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    insert,
    literal,
    select,
    union_all,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from app.engine._jobs import ACTIVITY, DEFAULT_QUEUE
from app.engine._store.combined import CLAIMED_TASK_COLUMNS
from app.engine._store.schema import attempts, events, outbox, runs, tasks
from app.engine._store.statements import COMPLETE_TASK, GUARDED_COMMIT

#: The marker of the deliberate failure (``invalid_text_representation``).
REFUSED = "fused step refused, history moved or operation id taken: "
#: The columns of a task row inserted queued (``scheduled_task_row``).
QUEUED_TASK_COLUMNS = CLAIMED_TASK_COLUMNS[:13]
#: The columns' defaults, written explicitly (see ``_fused_step``).
_CLAIMED_DEFAULTS: dict[str, Any] = {"needs_reconcile": False, "cancel_requested": False}
_QUEUED_DEFAULTS: dict[str, Any] = _CLAIMED_DEFAULTS | {"attempt": 0, "fencing_token": 0}
#: SQLSTATE of a failed cast of text to integer.
INVALID_TEXT_REPRESENTATION = "22P02"


def _event_row(n: int, moved: Any) -> Select[Any]:
    return select(
        bindparam("p_run", type_=String),
        bindparam(f"e{n}_seq", type_=Integer),
        bindparam(f"e{n}_type", type_=String),
        bindparam(f"e{n}_data", type_=events.c.data.type),
        bindparam("p_now", type_=Float),
    ).where(moved)


def _claimed_follow_up(scheduled: Any) -> Any:
    """The attempt row of a task inserted already claimed."""
    return insert(attempts).from_select(
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


def _queued_follow_up(scheduled: Any) -> Any:
    """The outbox row of a task inserted queued: ``activity_job(id, 1)``."""
    now = bindparam("p_now", type_=Float)
    return (
        pg_insert(outbox)
        .from_select(
            ["job_id", "kind", "ref", "queue", "not_before", "created_at", "relays", "relay_at"],
            select(
                func.concat("act:", scheduled.c.id, ":1"),
                literal(ACTIVITY),
                cast(scheduled.c.id, String),
                literal(DEFAULT_QUEUE),
                literal(0.0),
                now,
                literal(0),
                now,
            ),
            include_defaults=False,
        )
        .on_conflict_do_nothing()
    )


def _fused_step(*, claimed: bool) -> Select[Any]:
    columns = CLAIMED_TASK_COLUMNS if claimed else QUEUED_TASK_COLUMNS
    defaults = _CLAIMED_DEFAULTS if claimed else _QUEUED_DEFAULTS
    done = COMPLETE_TASK.cte("done")
    accepted = exists(select(done.c.run_id))
    finish = (
        attempts.update()
        .where(
            attempts.c.task_id == bindparam("p_task"),
            attempts.c.fencing_token == bindparam("p_token"),
            accepted,
        )
        .values(finished_at=bindparam("p_now"), outcome="completed", error=None)
        .cte("finish")
    )
    # The guard reads ``done``, so the task row is locked before the run row,
    # the order every other writer takes them in.
    guard = GUARDED_COMMIT.where(accepted).returning(runs.c.run_id).cte("guard")
    moved = exists(select(guard.c.run_id))
    scheduled = (
        pg_insert(tasks)
        .from_select(
            [*columns, *defaults],
            select(
                *(bindparam(f"t_{name}", type_=tasks.c[name].type) for name in columns),
                *(literal(value) for value in defaults.values()),
            ).where(moved),
            # The columns' Python-side defaults would be bound parameters
            # nobody fills inside a CTE: they are given above instead.
            include_defaults=False,
        )
        .on_conflict_do_nothing(index_elements=[tasks.c.operation_id])
        .returning(tasks.c.id)
        .cte("scheduled")
    )
    follow_up = (_claimed_follow_up if claimed else _queued_follow_up)(scheduled)
    logged = insert(events).from_select(
        ["run_id", "seq", "type", "data", "created_at"],
        union_all(_event_row(1, moved), _event_row(2, moved)),
    )
    run_id = select(done.c.run_id).scalar_subquery()
    refused = case(
        (
            and_(accepted, ~exists(select(scheduled.c.id))),
            cast(func.concat(REFUSED, run_id), Integer),
        ),
        else_=0,
    )
    return (
        select(
            run_id.label("run_id"),
            select(scheduled.c.id).scalar_subquery().label("task_id"),
            refused.label("refused"),
        )
        .add_cte(finish)
        .add_cte(follow_up.cte("follow_up"))
        .add_cte(logged.cte("logged"))
    )


#: The steady fused step in one statement: ``run_id`` None when the token was
#: stale (nothing written), else ``task_id`` of the next activity, claimed
#: for the worker (``FUSED_STEP_CLAIMED``) or queued with its outbox row
#: (``FUSED_STEP_QUEUED``, when the worker runs no follow-up itself); fails
#: with ``REFUSED`` (nothing written) when the completion matched and the
#: rest could not follow it.
FUSED_STEP_CLAIMED: Select[Any] = _fused_step(claimed=True)
FUSED_STEP_QUEUED: Select[Any] = _fused_step(claimed=False)


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the deliberate failure of a ``FUSED_STEP_*``."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) == INVALID_TEXT_REPRESENTATION and REFUSED in str(orig)
