"""A run's close on both databases: on PostgreSQL the workflow task that only
ends the run, alone or fused with the last activity's completion, is one
statement in autocommit (app/engine/_store/closing.py). It must write exactly
what the transaction of separate statements writes (the run closed, its
terminal event, its other work stopped, its jobs dropped and retracted), and
nothing at all when that transaction would have written nothing or been
rolled back: a moved history, a closed run, a stale token."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert

from app.engine import _history_commands as ev
from app.engine._errors import StaleLease
from app.engine._history_commands import HistoryCommand, RecordedEvent
from app.engine._jobs import RETRACT, WORKFLOW_TASK, Job
from app.engine._replay import Outcome, WorkflowTaskResult
from app.engine._store import Store
from app.engine._store.closing import closing_outcome
from app.engine._store.rows import Claim, RunRow
from app.engine._store.schema import attempts, events, outbox, runs, tasks, timers
from app.engine._store.statements import SCHEDULE_ACTIVITY
from tests.engine.store_rows import rows
from tests.engine.test_fused_one_statement import _running_step, _task_row

DONE = WorkflowTaskResult(outcome=Outcome("completed", result={"n": 2}))


class _Statements:
    """The statements and transaction modes a store call sends."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sent: list[str] = []
        self.modes: list[Any] = []

    def __enter__(self) -> _Statements:
        event.listen(self.engine, "before_cursor_execute", self._sent)
        event.listen(self.engine, "begin", self._begin)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._sent)
        event.remove(self.engine, "begin", self._begin)

    def _sent(self, *args: Any) -> None:
        self.sent.append(args[2])

    def _begin(self, conn: Any) -> None:
        self.modes.append(conn.get_execution_options().get("isolation_level"))


def _other_work(store: Store, run: RunRow) -> dict[str, int]:
    """A second task running and a third queued (with its job), a pending
    timer (with its job), and a workflow-task job of the run."""
    dialect = store.engine.dialect.name
    with store.transaction() as tx:
        running = tx.conn.execute(
            SCHEDULE_ACTIVITY[dialect], _task_row(run.run_id, 5, f"{run.run_id}:5")
        ).scalar_one()
        queued = tx.conn.execute(
            SCHEDULE_ACTIVITY[dialect], _task_row(run.run_id, 6, f"{run.run_id}:6")
        ).scalar_one()
        tx.conn.execute(insert(timers).values(run_id=run.run_id, cmd=7, fire_at=1e10))
        for job_id, kind, ref in [
            (f"act:{queued}:1", "activity", str(queued)),
            (f"tmr:{run.run_id}:7", "timer", f"{run.run_id}|7"),
            (f"wft:{run.run_id}:9", WORKFLOW_TASK, run.run_id),
        ]:
            tx.conn.execute(
                insert(outbox).values(
                    job_id=job_id, kind=kind, ref=ref, queue="q", not_before=0.0, created_at=0.0
                )
            )
    claimed = store.claim_activity(int(running), worker_id="w", code_version="v")
    assert claimed is not None
    return {"running": int(running), "queued": int(queued)}


def _retracted(jobs: list[Job]) -> set[str]:
    assert all(job.kind == RETRACT for job in jobs), jobs
    return {job.job_id for job in jobs}


def _assert_closed(store: Store, run: RunRow, length: int, work: dict[str, int]) -> None:
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.status, row.result, row.error) == ("completed", {"n": 2}, None)
    assert (row.history_length, row.pending_task, row.active_key) == (length, False, None)
    assert row.closed_at is not None
    [last] = rows(store, events, events.c.run_id == run.run_id, events.c.seq == length)
    assert (last.type, last.data) == (
        ev.WORKFLOW_COMPLETED,
        {"status": "completed", "result": {"n": 2}},
    )
    [running] = rows(store, tasks, tasks.c.id == work["running"])
    assert (running.status, running.cancel_requested) == ("running", True)
    [queued] = rows(store, tasks, tasks.c.id == work["queued"])
    assert (queued.status, queued.closed_at is not None) == ("cancelled", True)
    [timer] = rows(store, timers, timers.c.run_id == run.run_id)
    assert timer.status == "cancelled"
    assert rows(store, outbox) == []


def test_a_close_fused_with_the_last_result_is_written_whole(store: Store) -> None:
    run, claim = _running_step(store, "wf-close")
    work = _other_work(store, run)
    with store.transaction() as tx:  # the finishing task's job, relayed once
        tx.conn.execute(
            insert(outbox).values(
                job_id=f"act:{claim.task_id}:1",
                kind="activity",
                ref=str(claim.task_id),
                queue="q",
                not_before=0.0,
                created_at=0.0,
                relays=1,
            )
        )
    completed = _completed(run, claim)
    with _Statements(store.engine) as seen:
        done = store.complete_and_continue(claim, "ok", run, completed, DONE, offer=None)
    assert done is not None and done.claimed is None
    if store.engine.dialect.name == "postgresql":
        assert (len(seen.sent), seen.modes) == (1, ["AUTOCOMMIT"])
    assert _retracted(done.jobs) == {
        f"act:{work['queued']}:1",
        f"tmr:{run.run_id}:7",
        f"wft:{run.run_id}:1",  # the start's, never consumed here
        f"wft:{run.run_id}:9",
        f"act:{claim.task_id}:1",
        f"act:{claim.task_id}:1~1",
    }
    [finished] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (finished.status, finished.result, finished.cancel_requested) == (
        "completed",
        "ok",
        False,
    )
    [attempt] = rows(store, attempts, attempts.c.task_id == claim.task_id)
    assert attempt.outcome == "completed" and attempt.finished_at is not None
    [result] = rows(store, events, events.c.seq == completed.seq, events.c.run_id == run.run_id)
    assert (result.type, result.data) == (completed.type, completed.data)
    _assert_closed(store, run, completed.seq + 1, work)


def test_a_workflow_task_that_ends_its_run_is_written_whole(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-task")
    work = _other_work(store, run)
    after = _after_its_result(store, run, claim)
    with _Statements(store.engine) as seen:
        jobs = store.commit_workflow_task(after, DONE)
    assert jobs is not None
    if store.engine.dialect.name == "postgresql":
        assert (len(seen.sent), seen.modes) == (1, ["AUTOCOMMIT"])
    # The workflow-task jobs are this task's own: consumed, not retracted.
    assert _retracted(jobs) == {f"act:{work['queued']}:1", f"tmr:{run.run_id}:7"}
    _assert_closed(store, run, after.history_length + 1, work)


def test_a_failed_run_keeps_its_error(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-failed")
    error = {"type": "Boom", "message": "no"}
    failed = WorkflowTaskResult(outcome=Outcome("failed", error=error))
    completed = _completed(run, claim)
    assert store.complete_and_continue(claim, "ok", run, completed, failed) is not None
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.status, row.result, row.error, row.active_key) == ("failed", None, error, None)
    [last] = rows(store, events, events.c.run_id == run.run_id, events.c.seq == completed.seq + 1)
    assert (last.type, last.data) == (ev.WORKFLOW_FAILED, {"status": "failed", "error": error})


def test_a_moved_history_writes_nothing_of_the_fused_close(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-moved")
    with store.transaction() as tx:  # a signal arrives after the replay
        tx.append_event(run.run_id, ev.SIGNAL_RECEIVED, {"name": "s", "payload": None})
    completed = _completed(run, claim)
    assert store.complete_and_continue(claim, "ok", run, completed, DONE) is None
    [task] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (task.status, task.result) == ("running", None)
    [attempt] = rows(store, attempts, attempts.c.task_id == claim.task_id)
    assert attempt.outcome is None
    _assert_open(store, run, run.history_length + 1)
    store.complete_activity(claim.task_id, claim.token, "ok")  # the usual path goes on


def test_a_moved_history_writes_nothing_of_the_close(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-task-moved")
    work = _other_work(store, run)
    after = _after_its_result(store, run, claim)
    with store.transaction() as tx:
        tx.append_event(run.run_id, ev.SIGNAL_RECEIVED, {"name": "s", "payload": None})
    assert store.commit_workflow_task(after, DONE) is None
    _assert_open(store, run, after.history_length + 1)
    [running] = rows(store, tasks, tasks.c.id == work["running"])
    assert (running.status, running.cancel_requested) == ("running", False)
    [queued] = rows(store, tasks, tasks.c.id == work["queued"])
    assert queued.status == "scheduled"
    [timer] = rows(store, timers, timers.c.run_id == run.run_id)
    assert timer.status == "pending"
    assert {row.kind for row in rows(store, outbox)} == {"activity", "timer", WORKFLOW_TASK}


def test_a_closed_run_is_not_closed_again(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-twice")
    after = _after_its_result(store, run, claim)
    with store.transaction() as tx:
        tx.terminate(run.run_id, "stop")
    assert store.commit_workflow_task(after, DONE) is None
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert row.status == "terminated"


def test_a_stale_token_writes_nothing_of_the_close_and_is_refused(store: Store) -> None:
    run, claim = _running_step(store, "wf-close-stale")
    completed = _completed(run, claim)
    with pytest.raises(StaleLease):
        store.complete_and_continue(
            replace(claim, token=claim.token + 1), "late", run, completed, DONE
        )
    _assert_open(store, run, run.history_length)
    [task] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (task.status, task.result) == ("running", None)


def _completed(run: RunRow, claim: Claim) -> RecordedEvent:
    return RecordedEvent(
        seq=run.history_length + 1,
        type=ev.ACTIVITY_COMPLETED,
        data={"cmd": claim.cmd, "activity": "act", "result": "ok", "attempts": 1},
    )


def _assert_open(store: Store, run: RunRow, length: int) -> None:
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.status, row.history_length, row.active_key) == ("running", length, run.workflow_id)
    assert rows(store, events, events.c.run_id == run.run_id, events.c.seq > length) == []


_MARKER = HistoryCommand(cmd=3, type=ev.MARKER_RECORDED, attrs={"kind": "now", "id": "n"})


@pytest.mark.parametrize(
    "step",
    [
        WorkflowTaskResult(),
        WorkflowTaskResult(commands=[_MARKER], outcome=DONE.outcome),
        WorkflowTaskResult(outcome=Outcome("cancelled"), cancel_phase="archiving"),
        WorkflowTaskResult(outcome=Outcome("cancelled"), cancel_delivered=True),
        WorkflowTaskResult(outcome=DONE.outcome, park_reason="look"),
        WorkflowTaskResult(outcome=Outcome("needs-human", error={"type": "X"})),
        WorkflowTaskResult(outcome=Outcome("blocked-nondeterministic", error={"type": "X"})),
        WorkflowTaskResult(outcome=Outcome("continued-as-new", continue_input=1)),
    ],
    ids=["open", "commands", "phase", "cancel", "park", "parked", "blocked", "continued"],
)
def test_only_a_plain_end_is_a_one_statement_close(step: WorkflowTaskResult) -> None:
    """Every other step needs what the statement does not write (commands, a
    cancel phase, a parked row keeping its active key, the next run)."""
    assert closing_outcome(step) is None


@pytest.mark.parametrize("status", ["completed", "failed", "timed-out", "cancelled"])
def test_a_plain_end_is_a_one_statement_close(status: str) -> None:
    outcome = Outcome(status)
    assert closing_outcome(WorkflowTaskResult(outcome=outcome)) is outcome


def _after_its_result(store: Store, run: RunRow, claim: Claim) -> RunRow:
    """The run once ``claim``'s result is recorded the usual way (unfused)."""
    store.complete_activity(claim.task_id, claim.token, "ok")
    after = store.find_run(run.run_id)
    assert after is not None
    return after
