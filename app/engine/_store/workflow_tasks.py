"""Committing a workflow task: commands, outcome, cancellation, guarded by history length."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, insert, update

from app.engine import _history_commands as ev
from app.engine._history_commands import HistoryCommand
from app.engine._jobs import Job, activity_job, timer_job
from app.engine._policy import ActivityOptions
from app.engine._registry import OPERATOR_RESUME
from app.engine._replay import Outcome, WorkflowTaskResult
from app.engine._store.closing import OneStatementClose, closing_outcome, terminal_event_data
from app.engine._store.eager import EagerClaims, EagerOffer
from app.engine._store.one_statement import OneStatementSteps, steady_schedule
from app.engine._store.rows import RunRow
from app.engine._store.run_commands import RunCommands
from app.engine._store.scheduled import scheduled_event_data, scheduled_task_row
from app.engine._store.schema import (
    TERMINAL_EVENT,
    outbox,
    parse_timestamp,
    runs,
    tasks,
    timers,
)
from app.engine._store.statements import (
    DROP_WORKFLOW_TASK_JOBS,
    GUARDED_CLOSE,
    GUARDED_COMMIT,
    SCHEDULE_ACTIVITY,
    TASK_BY_OPERATION,
)
from app.engine._store.tx import Tx, closing_values
from app.engine._tables import (
    OPEN_STATUSES,
    PARKED_STATUSES,
    WAITING_FOR_OPERATOR,
)


class WorkflowTasks(EagerClaims, RunCommands, OneStatementClose, OneStatementSteps):
    def commit_workflow_task(
        self, run: RunRow, step: WorkflowTaskResult, *, offer: EagerOffer | None = None
    ) -> list[Job] | None:
        """Commit a workflow task's commands; None if history moved meanwhile.
        ``offer``: the first activity it schedules that the offering worker
        can run is written already claimed for it (``offer.taken``), with no job.

        The history cap (``max_history_events``) is the workflow's to enforce
        (``should_continue_as_new``), so the commit takes no such parameter."""
        if self.engine.dialect.name == "postgresql":
            # A run's close, or a task that schedules one activity (a run's
            # first), in one round trip (``_store/closing.py``,
            # ``_store/one_statement.py``).
            closing = closing_outcome(step)
            if closing is not None:
                return self._close_alone(run, closing)
            steady = steady_schedule(step)
            if steady is not None:
                written = self._schedule_in_one_statement(run, steady, offer)
                if written is not None:
                    return written
            # Not such a task, or a moved history or taken operation id:
            # nothing was written, and the transaction handles each as ever.
        with self.transaction() as tx:
            if not self._write_step(tx, run, step, expected=run.history_length, offer=offer):
                return None  # nothing written yet: the empty transaction commits harmlessly
            self.faults.hit("workflow_task.mid_commit")
            return tx.jobs

    def _write_step(
        self,
        tx: Tx,
        run: RunRow,
        step: WorkflowTaskResult,
        *,
        expected: int,
        offer: EagerOffer | None = None,
        jobs_to_drop: bool = True,
    ) -> bool:
        """Write a workflow task's commands after ``run.history_length``, guarded
        by the history length ``expected`` (the one replayed, and read by the
        caller); False, with nothing written, when history moved meanwhile.
        ``offer``: an activity this task schedules may be claimed at once.
        ``jobs_to_drop``: False when the caller knows no workflow-task job of
        the run can be left (see ``complete_and_continue``)."""
        written = len(step.commands) + (1 if step.outcome is not None else 0)
        if not self._guard(tx, run, step, expected, run.history_length + written):
            return False
        if jobs_to_drop:
            tx.conn.execute(DROP_WORKFLOW_TASK_JOBS, {"p_ref": run.run_id})
        follow_ups: list[tuple[str, dict[str, Any]]] = []
        seq = run.history_length
        for command in step.commands:
            seq += 1
            self._write_command(tx, run, seq, command, follow_ups, offer)
        if step.outcome is not None:
            seq += 1
            self._write_outcome(tx, run, seq, step.outcome)
        # The task's own events, in one statement, before any follow-up event
        # takes the next history position.
        tx.flush_events()
        if step.cancel_delivered:
            follow_ups.extend(self._stop_active_work(tx, run.run_id, step.cancel_boundary))
        for type_, data in follow_ups:
            tx.append_event(run.run_id, type_, data)
        return True

    def _guard(
        self, tx: Tx, run: RunRow, step: WorkflowTaskResult, expected: int, new_length: int
    ) -> bool:
        """Move the run's history length from ``expected`` to ``new_length``;
        False when history moved meanwhile (or the run closed). A step that
        ends the run closes its row in the same statement."""
        park = step.park_reason is not None and step.outcome is None
        outcome = step.outcome
        if not step.cancel_phase and not park:
            params = {
                "p_run": run.run_id,
                "p_expected": expected,
                "p_length": new_length,
                "p_now": tx.now,
            }
            if outcome is None:
                return bool(tx.conn.execute(GUARDED_COMMIT, params).rowcount)
            if outcome.status not in PARKED_STATUSES:
                closing = {
                    "p_status": outcome.status,
                    "p_run_result": outcome.result,
                    "p_run_error": outcome.error,
                }
                return bool(tx.conn.execute(GUARDED_CLOSE, params | closing).rowcount)
        values: dict[str, Any] = {
            "history_length": new_length,
            "pending_task": False,
            "updated_at": tx.now,
        }
        if step.cancel_phase:
            values["cancel_phase"] = step.cancel_phase
        if park:
            # The code waits for an operator: parked, holding no worker.
            values["status"] = "needs-human"
            values["error"] = {"type": WAITING_FOR_OPERATOR, "message": step.park_reason}
            if step.resume_signal and step.resume_signal != OPERATOR_RESUME:
                # What ``resume_run`` sends: the signal this workflow waits for.
                values["error"]["resume_signal"] = step.resume_signal
        if outcome is not None:
            # The run ends (or parks) in this same statement (``_write_outcome``).
            values |= closing_values(outcome.status, outcome.result, outcome.error, tx.now)
        return bool(
            tx.conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run.run_id,
                    runs.c.history_length == expected,
                    runs.c.status.in_(OPEN_STATUSES),
                )
                .values(**values)
            ).rowcount
        )

    def _write_command(
        self,
        tx: Tx,
        run: RunRow,
        seq: int,
        command: HistoryCommand,
        follow_ups: list[tuple[str, dict[str, Any]]],
        offer: EagerOffer | None,
    ) -> None:
        data = command.to_event_data()
        if command.type == ev.ACTIVITY_SCHEDULED:
            data = scheduled_event_data(command)
        tx.defer_event(run.run_id, seq, command.type, data)
        attrs = command.attrs
        if command.type == ev.ACTIVITY_SCHEDULED:
            conflict = self._schedule_activity(tx, run, command, offer)
            if conflict is not None:
                follow_ups.append(conflict)
        elif command.type == ev.TIMER_STARTED:
            fire_at = parse_timestamp(attrs["fire_at"])
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
            ref = f"{run.run_id}|{attrs['timer']}"
            tx.drop_jobs((outbox.c.kind == "timer") & (outbox.c.ref == ref))
        elif command.type == ev.CHILD_WORKFLOW_REQUESTED:
            follow_ups.append(self._start_child(tx, command))
        elif command.type in ev.RUN_COMMANDS:
            follow_ups.append(self._carry_out(tx, run, command))
        elif command.type == ev.ACTIVITY_CANCEL_REQUESTED:
            # One activity, in this same transaction: a crash after the commit
            # cannot lose the request (the attempt's next heartbeat reads it).
            follow_ups.extend(self._stop_tasks(tx, run.run_id, tasks.c.cmd == attrs["target"]))

    def _start_child(self, tx: Tx, command: HistoryCommand) -> tuple[str, dict[str, Any]]:
        """Start the child in the transaction that records its request: no
        crash can leave a request without its start, or start it twice."""
        attrs = command.attrs
        existing = tx.newest_run(attrs["workflow_id"])
        if existing is not None:
            run_id, created = existing.run_id, False  # a workflow id names one child
        else:
            started = tx.start_run(
                workflow_name=attrs["workflow"],
                workflow_version=int(attrs["version"]),
                workflow_id=attrs["workflow_id"],
                input=attrs["input"],
            )
            run_id, created = started.run_id, started.created
        data = {"cmd": command.cmd, "workflow_id": attrs["workflow_id"], "run_id": run_id}
        return ev.CHILD_WORKFLOW_STARTED, data | {"created": created}

    def _schedule_activity(
        self, tx: Tx, run: RunRow, command: HistoryCommand, offer: EagerOffer | None
    ) -> tuple[str, dict[str, Any]] | None:
        attrs = command.attrs
        op = attrs["operation_id"]
        row = scheduled_task_row(run.run_id, command, tx.now)
        if offer is not None and offer.wants(attrs["activity"]):
            row |= offer.claimed_row(ActivityOptions.from_json(attrs["options"]), tx.now)
            task_id = self._insert_claimed(tx, row, run, command, offer)
        else:
            task_id = tx.conn.execute(SCHEDULE_ACTIVITY[tx.conn.dialect.name], row).scalar()
            if task_id is not None:
                tx.add_job(activity_job(int(task_id), 1, activity=attrs["activity"]))
        if task_id is not None:
            return None
        # The operation id is taken: by this same operation, done (its result
        # is the answer), or by another use, which is refused.
        existing = tx.conn.execute(TASK_BY_OPERATION, {"p_operation": op}).one()
        base = {"cmd": command.cmd, "activity": attrs["activity"], "attempts": 0}
        if existing.input_hash == attrs["input_hash"] and existing.status == "completed":
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

    def _write_outcome(self, tx: Tx, run: RunRow, seq: int, outcome: Outcome) -> None:
        data = terminal_event_data(outcome)
        tx.defer_event(run.run_id, seq, TERMINAL_EVENT[outcome.status], data)
        # The run's row was closed by the guard (``_guard``).
        if outcome.status not in PARKED_STATUSES:
            tx.stop_run_work(run.run_id)
        if outcome.status == "continued-as-new":
            tx.start_run(
                workflow_name=run.workflow_name,
                workflow_version=run.workflow_version,
                workflow_id=run.workflow_id,
                input=outcome.continue_input,
                continued_from=run.run_id,
            )

    def _stop_active_work(
        self, tx: Tx, run_id: str, boundary: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Cancellation reached the code: stop queued activities, tell running ones.

        Only work scheduled before the cancel reached the code (command number up
        to ``boundary``) is stopped. What the code scheduled while handling the
        cancel (closing a PR, deleting a branch) may sit in this same commit when
        nothing was in flight, and must run. A full replay delivers the same
        cancel at the same boundary again, so repeating this is harmless.
        """
        return self._stop_tasks(tx, run_id, tasks.c.cmd <= boundary)

    def _stop_tasks(
        self, tx: Tx, run_id: str, which: ColumnElement[bool]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Cancel the run's queued tasks among ``which`` (their failure events are
        returned) and ask its running ones to stop."""
        queued = tx.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "scheduled", which)
            .values(status="cancelled", cancel_requested=True, closed_at=tx.now)
            .returning(tasks.c.cmd, tasks.c.activity, tasks.c.attempt)
        ).all()
        tx.conn.execute(
            update(tasks)
            .where(tasks.c.run_id == run_id, tasks.c.status == "running", which)
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
            tx.conn.execute(DROP_WORKFLOW_TASK_JOBS, {"p_ref": run_id})
            tx.conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.status.not_in(OPEN_STATUSES))
                .values(pending_task=False)
            )
