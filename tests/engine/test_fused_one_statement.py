"""The steady fused step (a result whose workflow task schedules one activity,
claimed at once) on both databases: on PostgreSQL it is one statement in
autocommit (app/engine/_store/one_statement.py), which must write exactly
what the transaction of separate statements writes, and nothing at all when
that transaction would have been rolled back or refused. A run's first
workflow task (one activity scheduled) is one statement the same way, and a
claim, one statement already, is sent in autocommit there too."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, insert

from app.engine import _history_commands as ev
from app.engine._errors import StaleLease
from app.engine._history_commands import HistoryCommand, RecordedEvent
from app.engine._jobs import DEFAULT_QUEUE, activity_job
from app.engine._policy import ActivityOptions, Timeouts
from app.engine._replay import WorkflowTaskResult
from app.engine._store import Store
from app.engine._store.eager import EagerOffer
from app.engine._store.rows import Claim, Failure, RunRow
from app.engine._store.schema import attempts, events, outbox, runs, tasks
from app.engine._store.statements import SCHEDULE_ACTIVITY
from tests.engine.store_rows import rows, start

OPTIONS = ActivityOptions(timeouts=Timeouts(start_to_close=60.0))


def _task_row(run_id: str, cmd: int, operation_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "cmd": cmd,
        "activity": "act",
        "operation_id": operation_id,
        "input": {"i": cmd},
        "input_hash": "h",
        "options": OPTIONS.to_json(),
        "has_reconcile": False,
        "status": "scheduled",
        "scheduled_at": 0.0,
        "next_attempt_at": 0.0,
        "schedule_to_start_deadline": None,
        "schedule_to_close_deadline": None,
    }


def _running_step(store: Store, workflow_id: str) -> tuple[RunRow, Claim]:
    """A run whose activity (command 2) is claimed, token 1."""
    run_id = start(store, workflow_id, input={})[0].run_id
    with store.transaction() as tx:
        stmt = SCHEDULE_ACTIVITY[tx.conn.dialect.name]
        task_id = int(tx.conn.execute(stmt, _task_row(run_id, 2, f"{run_id}:2")).scalar_one())
    claim = store.claim_activity(task_id, worker_id="w", code_version="v")
    run = store.find_run(run_id)
    assert claim is not None and run is not None
    return run, claim


def _step(run: RunRow, claim: Claim) -> tuple[RecordedEvent, WorkflowTaskResult]:
    completed = RecordedEvent(
        seq=run.history_length + 1,
        type=ev.ACTIVITY_COMPLETED,
        data={"cmd": claim.cmd, "activity": "act", "result": "ok", "attempts": 1},
    )
    return completed, WorkflowTaskResult(commands=[_scheduled(run.run_id, 3)])


def _scheduled(run_id: str, cmd: int) -> HistoryCommand:
    """Command ``cmd`` of the run: schedule activity ``act`` with input ``cmd``."""
    return HistoryCommand(
        cmd=cmd,
        type=ev.ACTIVITY_SCHEDULED,
        attrs={
            "activity": "act",
            "operation_id": f"{run_id}:{cmd}",
            "input": {"i": cmd},
            "input_hash": f"h{cmd}",
            "options": OPTIONS.to_json(),
        },
    )


def _offer(eager: bool = True) -> EagerOffer | None:
    return EagerOffer(worker_id="w", code_version="v", activities={"act"}) if eager else None


def test_a_steady_step_is_written_whole(store: Store) -> None:
    run, claim = _running_step(store, "wf-steady")
    completed, step = _step(run, claim)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        done = store.complete_and_continue(claim, "ok", run, completed, step, offer=_offer())
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert done is not None and done.jobs == []
    assert done.claimed is not None and (done.claimed.cmd, done.claimed.token) == (3, 1)
    if store.engine.dialect.name == "postgresql":
        assert len(statements) == 1  # the one-statement step, not the transaction
    [finished] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (finished.status, finished.result) == ("completed", "ok")
    [attempt] = rows(store, attempts, attempts.c.task_id == claim.task_id)
    assert attempt.outcome == "completed" and attempt.finished_at is not None
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.history_length, row.pending_task) == (run.history_length + 2, False)
    history = rows(store, events, events.c.run_id == run.run_id, events.c.seq > run.history_length)
    assert [(e.seq, e.type) for e in history] == [
        (run.history_length + 1, ev.ACTIVITY_COMPLETED),
        (run.history_length + 2, ev.ACTIVITY_SCHEDULED),
    ]
    assert history[0].data == completed.data
    assert "input" not in history[1].data and history[1].data["input_hash"] == "h3"
    [nxt] = rows(store, tasks, tasks.c.id == done.claimed.task_id)
    assert (nxt.status, nxt.attempt, nxt.fencing_token, nxt.worker_id) == ("running", 1, 1, "w")
    assert (nxt.input, nxt.needs_reconcile, nxt.cancel_requested) == ({"i": 3}, False, False)
    [started] = rows(store, attempts, attempts.c.task_id == nxt.id)
    assert (started.attempt, started.fencing_token, started.worker_id) == (1, 1, "w")
    assert rows(store, outbox, outbox.c.kind == "activity") == []


def test_a_steady_step_without_an_eager_claim_queues_the_next_activity(store: Store) -> None:
    run, claim = _running_step(store, "wf-queued")
    completed, step = _step(run, claim)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        done = store.complete_and_continue(claim, "ok", run, completed, step, offer=None)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert done is not None and done.claimed is None
    if store.engine.dialect.name == "postgresql":
        assert len(statements) == 1
    [nxt] = rows(store, tasks, tasks.c.run_id == run.run_id, tasks.c.cmd == 3)
    assert (nxt.status, nxt.attempt, nxt.fencing_token, nxt.worker_id) == ("scheduled", 0, 0, None)
    assert (nxt.needs_reconcile, nxt.cancel_requested, nxt.input) == (False, False, {"i": 3})
    assert done.jobs == [activity_job(nxt.id, 1, activity="act")]
    [job] = rows(store, outbox, outbox.c.kind == "activity")
    assert (job.job_id, job.ref, job.queue) == (done.jobs[0].job_id, str(nxt.id), DEFAULT_QUEUE)
    assert (job.not_before, job.relays, job.relay_at) == (0.0, 0, job.created_at)
    assert rows(store, attempts, attempts.c.task_id == nxt.id) == []
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert row.history_length == run.history_length + 2


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_moved_history_writes_nothing_of_the_step(store: Store, eager: bool) -> None:
    run, claim = _running_step(store, "wf-moved")
    completed, step = _step(run, claim)
    with store.transaction() as tx:  # a signal arrives after the replay
        tx.append_event(run.run_id, ev.SIGNAL_RECEIVED, {"name": "s", "payload": None})
    offer = _offer(eager)
    assert store.complete_and_continue(claim, "ok", run, completed, step, offer=offer) is None
    [task] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (task.status, task.result) == ("running", None)
    [attempt] = rows(store, attempts, attempts.c.task_id == claim.task_id)
    assert attempt.outcome is None
    assert len(rows(store, tasks, tasks.c.run_id == run.run_id)) == 1
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert row.history_length == run.history_length + 1  # the signal only
    # The usual completion still goes through.
    store.complete_activity(claim.task_id, claim.token, "ok")


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_taken_operation_id_takes_the_usual_path(store: Store, eager: bool) -> None:
    run, claim = _running_step(store, "wf-taken")
    completed, step = _step(run, claim)
    with store.transaction() as tx:  # command 3's operation id, done before
        row = _task_row(run.run_id, 9, f"{run.run_id}:3") | {"input_hash": "h3"}
        tx.conn.execute(insert(tasks).values(row | {"status": "completed", "result": "old"}))
    done = store.complete_and_continue(claim, "ok", run, completed, step, offer=_offer(eager))
    assert done is not None and done.claimed is None
    history = rows(store, events, events.c.run_id == run.run_id, events.c.seq > run.history_length)
    assert [e.type for e in history] == [
        ev.ACTIVITY_COMPLETED,
        ev.ACTIVITY_SCHEDULED,
        ev.ACTIVITY_COMPLETED,
    ]
    assert history[2].data["reused"] == f"{run.run_id}:3"
    [task] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert task.status == "completed"


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_stale_token_writes_nothing_and_is_refused(store: Store, eager: bool) -> None:
    run, claim = _running_step(store, "wf-stale")
    completed, step = _step(run, claim)
    with pytest.raises(StaleLease):
        store.complete_and_continue(
            replace(claim, token=claim.token + 1), "late", run, completed, step, offer=_offer(eager)
        )
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert row.history_length == run.history_length
    assert rows(store, events, events.c.run_id == run.run_id, events.c.seq > 1) == []
    assert len(rows(store, tasks, tasks.c.run_id == run.run_id)) == 1


def test_a_stale_result_leaves_the_earlier_attempt_as_it_ended(store: Store) -> None:
    run, claim = _running_step(store, "wf-retried")
    store.fail_activity(claim.task_id, claim.token, Failure("transient", "Boom", "x", 0.0))
    again = store.claim_activity(claim.task_id, worker_id="w2", code_version="v")
    assert again is not None and again.token == claim.token + 1
    [ended] = rows(store, attempts, attempts.c.fencing_token == claim.token)
    completed, step = _step(run, claim)
    with pytest.raises(StaleLease):
        store.complete_and_continue(claim, "late", run, completed, step, offer=_offer())
    [after] = rows(store, attempts, attempts.c.fencing_token == claim.token)
    # As it ended, plus the rejected completion's mark (``_reject_stale``).
    assert after.outcome == f"{ended.outcome}; stale-completion-rejected"
    assert (after.finished_at, after.error) == (ended.finished_at, ended.error)
    [task] = rows(store, tasks, tasks.c.id == claim.task_id)
    assert (task.status, task.fencing_token, task.result) == ("running", again.token, None)


def test_a_claim_on_postgresql_is_one_statement_in_autocommit(store: Store) -> None:
    started = start(store, "wf-c", input={})[0]
    with store.transaction() as tx:
        stmt = SCHEDULE_ACTIVITY[tx.conn.dialect.name]
        task_id = int(tx.conn.execute(stmt, _task_row(started.run_id, 2, "c:2")).scalar_one())
    modes: list[Any] = []

    def on_begin(conn: Any) -> None:
        modes.append(conn.get_execution_options().get("isolation_level"))

    event.listen(store.engine, "begin", on_begin)
    try:
        claim = store.claim_activity(task_id, worker_id="w", code_version="v")
    finally:
        event.remove(store.engine, "begin", on_begin)
    assert claim is not None and claim.token == 1
    postgres = store.engine.dialect.name == "postgresql"
    assert modes == (["AUTOCOMMIT"] if postgres else [None])
    [attempt] = rows(store, attempts, attempts.c.task_id == task_id)
    assert (attempt.attempt, attempt.fencing_token, attempt.worker_id) == (1, 1, "w")


def _first_task(store: Store, workflow_id: str) -> tuple[RunRow, WorkflowTaskResult]:
    """A started run (its workflow-task job in the outbox) and the step of its
    first workflow task: schedule command 2."""
    run = store.find_run(start(store, workflow_id, input={})[0].run_id)
    assert run is not None
    return run, WorkflowTaskResult(commands=[_scheduled(run.run_id, 2)])


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_first_workflow_task_is_written_whole(store: Store, eager: bool) -> None:
    run, step = _first_task(store, f"wf-first-{eager}")
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    offer = _offer(eager)
    event.listen(store.engine, "before_cursor_execute", count)
    try:
        jobs = store.commit_workflow_task(run, step, offer=offer)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert jobs is not None
    if store.engine.dialect.name == "postgresql":
        assert len(statements) == 1
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.history_length, row.pending_task) == (2, False)
    [scheduled] = rows(store, events, events.c.run_id == run.run_id, events.c.seq == 2)
    assert scheduled.type == ev.ACTIVITY_SCHEDULED and scheduled.data["input_hash"] == "h2"
    [task] = rows(store, tasks, tasks.c.run_id == run.run_id)
    assert task.input == {"i": 2}
    # The task's own job is consumed; the activity is claimed, or queued with its job.
    left = rows(store, outbox)
    if eager:
        assert offer is not None and offer.taken is not None
        assert (offer.taken.task_id, offer.taken.token) == (task.id, 1)
        assert (jobs, left) == ([], [])
        assert (task.status, task.attempt, task.fencing_token, task.worker_id) == (
            "running",
            1,
            1,
            "w",
        )
        [started] = rows(store, attempts, attempts.c.task_id == task.id)
        assert (started.attempt, started.fencing_token, started.worker_id) == (1, 1, "w")
    else:
        assert jobs == [activity_job(task.id, 1, activity="act")]
        assert [(job.job_id, job.kind) for job in left] == [(jobs[0].job_id, "activity")]
        assert (task.status, task.attempt, task.fencing_token) == ("scheduled", 0, 0)
        assert rows(store, attempts, attempts.c.task_id == task.id) == []


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_moved_history_writes_nothing_of_the_first_task(store: Store, eager: bool) -> None:
    run, step = _first_task(store, f"wf-first-moved-{eager}")
    with store.transaction() as tx:  # a signal arrives after the replay
        tx.append_event(run.run_id, ev.SIGNAL_RECEIVED, {"name": "s", "payload": None})
    offer = _offer(eager)
    assert store.commit_workflow_task(run, step, offer=offer) is None
    assert offer is None or offer.taken is None
    [row] = rows(store, runs, runs.c.run_id == run.run_id)
    assert (row.history_length, row.pending_task) == (2, True)
    [signal] = rows(store, events, events.c.run_id == run.run_id, events.c.seq == 2)
    assert signal.type == ev.SIGNAL_RECEIVED
    assert rows(store, tasks, tasks.c.run_id == run.run_id) == []
    assert sorted(job.job_id for job in rows(store, outbox)) == [
        f"wft:{run.run_id}:1",
        f"wft:{run.run_id}:2",
    ]


@pytest.mark.parametrize("eager", [True, False], ids=["claimed", "queued"])
def test_a_taken_operation_id_in_a_first_task_takes_the_usual_path(
    store: Store, eager: bool
) -> None:
    run, step = _first_task(store, f"wf-first-taken-{eager}")
    with store.transaction() as tx:  # command 2's operation id, done before
        row = _task_row(run.run_id, 9, f"{run.run_id}:2") | {"input_hash": "h2"}
        tx.conn.execute(insert(tasks).values(row | {"status": "completed", "result": "old"}))
    offer = _offer(eager)
    assert store.commit_workflow_task(run, step, offer=offer) is not None
    assert offer is None or offer.taken is None
    history = rows(store, events, events.c.run_id == run.run_id, events.c.seq > 1)
    assert [e.type for e in history] == [ev.ACTIVITY_SCHEDULED, ev.ACTIVITY_COMPLETED]
    assert history[1].data["reused"] == f"{run.run_id}:2"
    assert len(rows(store, tasks, tasks.c.run_id == run.run_id)) == 1
