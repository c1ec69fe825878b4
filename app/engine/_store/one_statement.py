"""A step that schedules one activity as one statement on its own, on PostgreSQL.

A steady step (an activity's result whose workflow task schedules exactly
one next activity) wrote four statements in one transaction: the completion
with its attempt's end, the history-length guard, the next activity (inserted
already claimed with its attempt row, or queued with its outbox row), and
the two events. On PostgreSQL that is six round trips with
``BEGIN`` and ``COMMIT``. ``FUSED_STEP_*`` write all of it in **one**
statement with data-modifying CTEs, sent in autocommit: the statement is its
own transaction, so the step costs one round trip (the floor).
``TASK_STEP_*`` do the same for a workflow task of its own that schedules
one activity (a run's first, or one after a result the worker's cache did
not cover): the guard, the consumed workflow-task job, the activity and its
event, where the transaction took four statements and six round trips.

Each part writes only when the one before it matched (the guard only for a
current token, the schedule and the events only when the guard moved the
run), and the statement fails, writing nothing, in the one case where a part
matched and a later one did not: the completion (or the guard) was accepted
but the run's history moved (a signal, a cancel, another result) or the
operation id was taken. PostgreSQL has no ``RAISE`` in plain SQL, so the
failure is a cast of a marked text to an integer; it is built from a written
row, so the planner cannot fold it into a constant and fail every statement.
The caller (``FusedSteps.complete_and_continue``,
``WorkflowTasks.commit_workflow_task``) then takes the transaction of
separate statements, which handles those cases (and a stale token or a
moved history, where nothing here matched) as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from sqlalchemy.exc import DBAPIError

from app.engine import _history_commands as ev
from app.engine._history_commands import HistoryCommand, RecordedEvent
from app.engine._jobs import ACTIVITY, DEFAULT_QUEUE, WORKFLOW_TASK, Job, activity_job
from app.engine._policy import ActivityOptions
from app.engine._replay import WorkflowTaskResult
from app.engine._store.base import StoreBase
from app.engine._store.combined import (
    CLAIMED_TASK_COLUMNS,
    job_row_from,
    schedule_claimed_params,
)
from app.engine._store.eager import EagerOffer, first_attempt
from app.engine._store.rows import Claim, RunRow
from app.engine._store.scheduled import scheduled_event_data, scheduled_task_row
from app.engine._store.schema import attempts, events, outbox, runs, tasks
from app.engine._store.statements import COMPLETE_TASK, GUARDED_COMMIT

#: The marker of the deliberate failure (``invalid_text_representation``).
REFUSED = "fused step refused, history moved or operation id taken: "
#: The columns of a task row inserted queued (``scheduled_task_row``).
QUEUED_TASK_COLUMNS = CLAIMED_TASK_COLUMNS[:13]
#: The columns' defaults, written explicitly (see ``_one_statement_step``).
_CLAIMED_DEFAULTS: dict[str, Any] = {"needs_reconcile": False, "cancel_requested": False}
_QUEUED_DEFAULTS: dict[str, Any] = _CLAIMED_DEFAULTS | {"attempt": 0, "fencing_token": 0}
#: SQLSTATE of a failed cast of text to integer.
INVALID_TEXT_REPRESENTATION = "22P02"


def event_row(n: int, written: Any) -> Select[Any]:
    """Event ``n`` of a statement (``e<n>_*`` parameters), written only when
    ``written`` holds."""
    return select(
        bindparam("p_run", type_=String),
        bindparam(f"e{n}_seq", type_=Integer),
        bindparam(f"e{n}_type", type_=String),
        bindparam(f"e{n}_data", type_=events.c.data.type),
        bindparam("p_now", type_=Float),
    ).where(written)


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
    return job_row_from(
        func.concat("act:", scheduled.c.id, ":1"),
        literal(ACTIVITY),
        cast(scheduled.c.id, String),
        literal(DEFAULT_QUEUE),
    )


def events_written(count: int, written: Any) -> Any:
    """Events 1 to ``count`` of a statement, written only when ``written`` holds."""
    rows = [event_row(n, written) for n in range(1, count + 1)]
    return (
        insert(events)
        .from_select(
            ["run_id", "seq", "type", "data", "created_at"],
            union_all(*rows) if count > 1 else rows[0],
        )
        .cte("logged")
    )


def refusal(when: Any, run_id: Any) -> Any:
    """The statement's deliberate failure (``REFUSED``) when ``when`` holds.
    ``run_id`` is read from a written row, so the planner cannot fold the
    cast into a constant and fail every statement."""
    return case((when, cast(func.concat(REFUSED, run_id), Integer)), else_=0)


def completion_parts() -> tuple[Any, Any, Any]:
    """The parts of a statement that accept an activity's result first:
    ``done`` (``COMPLETE_TASK``), whether it matched (a current token), and
    its attempt's end, written only then. A statement's later parts test
    ``accepted``, so they write nothing for a stale token."""
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
    return done, accepted, finish


def _one_statement_step(*, claimed: bool, after_result: bool) -> Select[Any]:
    columns = CLAIMED_TASK_COLUMNS if claimed else QUEUED_TASK_COLUMNS
    defaults = _CLAIMED_DEFAULTS if claimed else _QUEUED_DEFAULTS
    ctes: list[Any] = []
    guard_update = GUARDED_COMMIT
    if after_result:
        done, accepted, finish = completion_parts()
        ctes.append(finish)
        # The guard reads ``done``, so the task row is locked before the run
        # row, the order every other writer takes them in.
        guard_update = guard_update.where(accepted)
    guard = guard_update.returning(runs.c.run_id).cte("guard")
    moved = exists(select(guard.c.run_id))
    if not after_result:
        # The job that brought this workflow task is consumed (a fused step
        # has none to drop: see ``FusedSteps.complete_and_continue``).
        consumed = outbox.delete().where(
            outbox.c.kind == WORKFLOW_TASK, outbox.c.ref == bindparam("p_run"), moved
        )
        ctes.append(consumed.cte("consumed"))
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
    ctes.append((_claimed_follow_up if claimed else _queued_follow_up)(scheduled).cte("follow_up"))
    ctes.append(events_written(2 if after_result else 1, moved))
    written = done.c.run_id if after_result else guard.c.run_id
    run_id = select(written).scalar_subquery()
    matched = accepted if after_result else moved
    refused = refusal(and_(matched, ~exists(select(scheduled.c.id))), run_id)
    return select(
        run_id.label("run_id"),
        select(scheduled.c.id).scalar_subquery().label("task_id"),
        refused.label("refused"),
    ).add_cte(*ctes)


#: The steady fused step in one statement: ``run_id`` None when the token was
#: stale (nothing written), else ``task_id`` of the next activity, claimed
#: for the worker (``FUSED_STEP_CLAIMED``) or queued with its outbox row
#: (``FUSED_STEP_QUEUED``, when the worker runs no follow-up itself); fails
#: with ``REFUSED`` (nothing written) when the completion matched and the
#: rest could not follow it.
FUSED_STEP_CLAIMED: Select[Any] = _one_statement_step(claimed=True, after_result=True)
FUSED_STEP_QUEUED: Select[Any] = _one_statement_step(claimed=False, after_result=True)
#: A workflow task of its own that schedules one activity (a run's first):
#: ``run_id`` None when history moved (nothing written), else as above; fails
#: with ``REFUSED`` (nothing written) when the operation id was taken.
TASK_STEP_CLAIMED: Select[Any] = _one_statement_step(claimed=True, after_result=False)
TASK_STEP_QUEUED: Select[Any] = _one_statement_step(claimed=False, after_result=False)


def steady_schedule(step: WorkflowTaskResult) -> HistoryCommand | None:
    """The one command of a steady step: a workflow task that only schedules
    one activity. None for any other step."""
    if (
        len(step.commands) != 1
        or step.outcome is not None
        or step.cancel_phase
        or step.cancel_delivered
        or step.park_reason is not None
    ):
        return None
    command = step.commands[0]
    return command if command.type == ev.ACTIVITY_SCHEDULED else None


@dataclass(frozen=True)
class Completion:
    """The activity result a one-statement step records before its task."""

    claim: Claim
    result: Any
    event: RecordedEvent


class OneStatementSteps(StoreBase):
    def _schedule_in_one_statement(
        self,
        run: RunRow,
        command: HistoryCommand,
        offer: EagerOffer | None,
        completion: Completion | None = None,
    ) -> list[Job] | None:
        """Commit the workflow task that schedules ``command`` after
        ``run.history_length`` (and first, ``completion``) as one statement in
        autocommit: one round trip. The jobs to hand on (none when the
        activity was claimed for ``offer``: ``offer.taken``), or None, with
        nothing written, when it could not be written so (a stale token, a
        moved history, a taken operation id): the caller's transaction then
        handles each as ever."""
        now = self.clock()
        activity = command.attrs["activity"]
        row = scheduled_task_row(run.run_id, command, now)
        claims = offer is not None and offer.wants(activity)
        if offer is not None and claims:
            options = ActivityOptions.from_json(command.attrs["options"])
            row |= offer.claimed_row(options, now)
            task_params = schedule_claimed_params(row)
        else:
            task_params = {f"t_{name}": row[name] for name in QUEUED_TASK_COLUMNS}
        params = {
            "p_now": now,
            "p_run": run.run_id,
            "p_expected": run.history_length,
        } | task_params
        seq = run.history_length + 1
        if completion is not None:
            params |= {
                "p_task": completion.claim.task_id,
                "p_token": completion.claim.token,
                "p_result": completion.result,
                "e1_seq": completion.event.seq,
                "e1_type": completion.event.type,
                "e1_data": completion.event.data,
            }
            seq = completion.event.seq + 1
        n = 1 if completion is None else 2
        params |= {
            "p_length": seq,
            f"e{n}_seq": seq,
            f"e{n}_type": command.type,
            f"e{n}_data": scheduled_event_data(command),
        }
        statement = _STATEMENTS[(claims, completion is not None)]
        # One statement is its own transaction: a crash "inside" it leaves
        # nothing, as a crash before it does.
        if completion is not None:
            self.faults.hit("fused.mid_commit")
        self.faults.hit("workflow_task.mid_commit")
        try:
            with self.one_statement() as tx:
                written = tx.conn.execute(statement, params).one()
        except DBAPIError as exc:
            if is_refusal(exc):
                return None
            raise
        if written.task_id is None:
            return None  # a stale token or a moved history: nothing matched
        task_id = int(written.task_id)
        if offer is None or not claims:
            return [activity_job(task_id, 1, activity=activity)]
        offer.taken = first_attempt(now, task_id, run, command)
        return []


#: By (claimed for the worker, after a completion).
_STATEMENTS = {
    (True, True): FUSED_STEP_CLAIMED,
    (False, True): FUSED_STEP_QUEUED,
    (True, False): TASK_STEP_CLAIMED,
    (False, False): TASK_STEP_QUEUED,
}


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is the deliberate failure of a one-statement step or close."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) == INVALID_TEXT_REPRESENTATION and REFUSED in str(orig)
