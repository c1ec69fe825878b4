"""A run's close as one statement on its own, on PostgreSQL.

The workflow task that ends a run (its code returned or raised, nothing else
to write) wrote four statements in a transaction: the guarded close of the
run row (``GUARDED_CLOSE``), the terminal event, the stop of the run's work
(``STOP_RUN_WORK``) and the drop of its workflow-task jobs; when fused with
the last activity's completion, that completion and its attempt's end too.
On PostgreSQL that is six round trips with ``BEGIN`` and ``COMMIT``.
``CLOSE_STEP`` (a workflow task's own commit) and ``CLOSE_AFTER_RESULT``
(fused with the completion) write all of it in **one** statement of
data-modifying CTEs, sent in autocommit: one round trip.

Each part writes only when the one it depends on matched: the close only
for a current token (``CLOSE_AFTER_RESULT``), the stop of the run's work and
the events only when the guard closed the run (``history_length`` still the
one replayed, the run still open). So a stale token and a moved history write
nothing, as before. When the completion matched but the guard did not,
``CLOSE_AFTER_RESULT`` fails on purpose (the cast of ``one_statement.py``) so
that the completion is not kept without its workflow task; the caller then
takes the transaction, which handles that case as it always did.

Every CTE reads the snapshot from before the statement, where the task being
completed is still ``running``: the stop of the run's tasks leaves that one
task alone (``done`` writes it; two writes of one row in one statement are
undefined), and the jobs dropped include its own, as the transaction's
separate statements (which see it completed) drop them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    String,
    and_,
    bindparam,
    cast,
    exists,
    or_,
    select,
    true,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import ReturningDelete

from app.engine._history_commands import RecordedEvent
from app.engine._jobs import WORKFLOW_TASK, Job, retractions
from app.engine._replay import Outcome, WorkflowTaskResult
from app.engine._store.base import StoreBase
from app.engine._store.one_statement import (
    completion_parts,
    events_written,
    is_refusal,
    refusal,
)
from app.engine._store.rows import Claim, RunRow
from app.engine._store.schema import TERMINAL_EVENT, outbox, runs, tasks
from app.engine._store.statements import (
    CANCEL_RUN_TIMERS,
    GUARDED_CLOSE,
    STOP_RUN_TASKS,
)
from app.engine._tables import PARKED_STATUSES


def closing_outcome(step: WorkflowTaskResult) -> Outcome | None:
    """The outcome of a step that only ends its run: no command, no cancel
    phase, not parked, not continued as new (which starts the next run).
    None for any other step: those keep the transaction."""
    outcome = step.outcome
    if (
        outcome is None
        or step.commands
        or step.cancel_phase
        or step.cancel_delivered
        or step.park_reason is not None
        or outcome.status in PARKED_STATUSES
        or outcome.status == "continued-as-new"
    ):
        return None
    return outcome


def terminal_event_data(outcome: Outcome) -> dict[str, Any]:
    """The terminal event's data (as ``WorkflowTasks._write_outcome`` writes it)."""
    data: dict[str, Any] = {"status": outcome.status}
    if outcome.result is not None:
        data["result"] = outcome.result
    if outcome.error is not None:
        data["error"] = outcome.error
    return data


def _dropped_jobs(closed: Any, cancelled_timers: Any, *, completed_task: bool) -> Any:
    """The run's jobs that may not outlive it, as ``STOP_RUN_WORK`` drops them."""
    run_id = bindparam("p_run", type_=String)
    not_running = select(cast(tasks.c.id, String)).where(
        tasks.c.run_id == run_id, tasks.c.status != "running"
    )
    activity_refs: Any = outbox.c.ref.in_(not_running)
    if completed_task:
        # Running in this snapshot, completed by ``done``.
        activity_refs = or_(
            activity_refs, outbox.c.ref == cast(bindparam("p_task", type_=Integer), String)
        )
    timer_refs = select(run_id + "|" + cast(cancelled_timers.c.cmd, String))
    stmt: ReturningDelete[Any, Any, Any] = (
        outbox.delete()
        .where(
            closed,
            or_(
                (outbox.c.kind == "workflow_task") & (outbox.c.ref == run_id),
                (outbox.c.kind == "activity") & activity_refs,
                (outbox.c.kind == "timer") & outbox.c.ref.in_(timer_refs),
            ),
        )
        .returning(outbox.c.job_id, outbox.c.queue, outbox.c.relays, outbox.c.kind)
    )
    return stmt.cte("dropped")


def _close(*, after_result: bool) -> Select[Any]:
    ctes: list[Any] = []
    guard_update = GUARDED_CLOSE
    stop_tasks = STOP_RUN_TASKS
    summary: list[Any] = []
    if after_result:
        done, accepted, finish = completion_parts()
        ctes.append(finish)
        # The guard reads ``done``, so the task row is locked before the run
        # row, the order every other writer takes them in.
        guard_update = guard_update.where(accepted)
        stop_tasks = stop_tasks.where(tasks.c.id != bindparam("p_task"))
    guard = guard_update.returning(runs.c.run_id).cte("guard")
    closed = exists(select(guard.c.run_id))
    ctes.append(stop_tasks.where(closed).cte("stopped"))
    cancelled_timers = CANCEL_RUN_TIMERS.where(closed).cte("cancelled_timers")
    ctes.append(cancelled_timers)
    ctes.append(events_written(2 if after_result else 1, closed))
    closed_id = select(guard.c.run_id).scalar_subquery()
    summary.append(closed_id.label("closed"))
    if after_result:
        run_id = select(done.c.run_id).scalar_subquery()
        refused = refusal(and_(accepted, ~closed), run_id)
        summary += [run_id.label("run_id"), refused.label("refused")]
    head = select(*summary).subquery("head")
    dropped = _dropped_jobs(closed, cancelled_timers, completed_task=after_result)
    return (
        select(head, dropped.c.job_id, dropped.c.queue, dropped.c.relays, dropped.c.kind)
        .select_from(head.outerjoin(dropped, true()))
        .add_cte(*ctes)
    )


#: A workflow task that only ends its run, in one statement: one row per job
#: dropped (at least one row); ``closed`` None when history moved or the run
#: was no longer open (nothing written).
CLOSE_STEP: Select[Any] = _close(after_result=False)
#: An activity's completion fused with the workflow task that ends the run:
#: ``run_id`` None when the token was stale (nothing written); fails with
#: ``REFUSED`` (nothing written) when the completion matched and the guard
#: did not; else the run is closed and one row comes back per job dropped.
CLOSE_AFTER_RESULT: Select[Any] = _close(after_result=True)


class OneStatementClose(StoreBase):
    """The store's side of ``CLOSE_STEP`` and ``CLOSE_AFTER_RESULT`` (PostgreSQL)."""

    def _close_alone(self, run: RunRow, outcome: Outcome) -> list[Job] | None:
        """Commit the workflow task that only ends ``run`` with ``outcome``:
        the jobs to hand on (retractions of the dropped ones), or None, with
        nothing written, when history moved (or the run closed) meanwhile."""
        length = run.history_length + 1
        params = _closing_params(run, outcome, length, event=1)
        # One statement is its own transaction: a crash "inside" it leaves
        # nothing, as a crash before it does.
        self.faults.hit("workflow_task.mid_commit")
        with self.one_statement() as tx:
            rows = tx.conn.execute(CLOSE_STEP, params | {"p_now": tx.now}).all()
        if rows[0].closed is None:
            return None
        # The task's own job is consumed, not retracted (as
        # ``DROP_WORKFLOW_TASK_JOBS`` consumes it in the transaction).
        return _retracted(rows, consumed=WORKFLOW_TASK)

    def _close_after_result(
        self, claim: Claim, result: Any, run: RunRow, completed: RecordedEvent, outcome: Outcome
    ) -> list[Job] | None:
        """Accept ``claim``'s ``result`` and end ``run`` with ``outcome`` in one
        statement: the jobs to hand on, or None, with nothing written, when
        the token was stale or history moved (the caller's transaction then
        handles either as it always did)."""
        length = completed.seq + 1
        params = _closing_params(run, outcome, length, event=2) | {
            "p_task": claim.task_id,
            "p_token": claim.token,
            "p_result": result,
            "e1_seq": completed.seq,
            "e1_type": completed.type,
            "e1_data": completed.data,
        }
        self.faults.hit("fused.mid_commit")
        self.faults.hit("workflow_task.mid_commit")
        try:
            with self.one_statement() as tx:
                rows = tx.conn.execute(CLOSE_AFTER_RESULT, params | {"p_now": tx.now}).all()
        except DBAPIError as exc:
            if is_refusal(exc):
                return None
            raise
        if rows[0].run_id is None:
            return None  # a stale token: nothing matched
        return _retracted(rows, consumed=None)


def _closing_params(run: RunRow, outcome: Outcome, length: int, *, event: int) -> dict[str, Any]:
    """The guard's and the terminal event's parameters: the run's history
    moves from the length replayed to ``length``, the terminal event being
    event ``event`` of the statement (the second after a completion)."""
    return {
        "p_run": run.run_id,
        "p_expected": run.history_length,
        "p_length": length,
        "p_status": outcome.status,
        "p_run_result": outcome.result,
        "p_run_error": outcome.error,
        f"e{event}_seq": length,
        f"e{event}_type": TERMINAL_EVENT[outcome.status],
        f"e{event}_data": terminal_event_data(outcome),
    }


def _retracted(rows: Sequence[Any], *, consumed: str | None) -> list[Job]:
    """Retractions of the jobs the statement dropped, but those of kind
    ``consumed``; a row without a job id is the head alone (nothing dropped)."""
    jobs: list[Job] = []
    for row in rows:
        if row.job_id is not None and row.kind != consumed:
            jobs.extend(retractions(row.job_id, row.queue, row.relays))
    return jobs
