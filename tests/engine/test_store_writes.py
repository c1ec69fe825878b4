"""The store's folded writes: a run's start in one guarded INSERT, a run's
close in fewer statements, and on PostgreSQL a claim, a completion and an
eager schedule each in one statement (app/engine/_store/combined.py). Each
test reads the rows back: what is written must be what the separate
statements wrote, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert

from app.engine import _history_commands as ev
from app.engine._history_commands import HistoryCommand
from app.engine._jobs import activity_job, timer_job
from app.engine._policy import ActivityOptions, Timeouts
from app.engine._store import Store
from app.engine._store.eager import EagerOffer
from app.engine._store.schema import attempts, events, outbox, runs, tasks, timers
from app.engine._store.statements import SCHEDULE_ACTIVITY
from tests.engine.store_rows import rows, start

OPTIONS = ActivityOptions(timeouts=Timeouts(start_to_close=60.0))


def _start(store: Store, workflow_id: str, **kwargs: Any) -> tuple[str, bool]:
    started, _jobs = start(store, workflow_id, input={"x": 1}, **kwargs)
    return started.run_id, started.created


def _task_row(run_id: str, cmd: int, status: str = "scheduled") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "cmd": cmd,
        "activity": "act",
        "operation_id": f"{run_id}:{cmd}",
        "input": {"i": cmd},
        "input_hash": "h",
        "options": OPTIONS.to_json(),
        "has_reconcile": False,
        "status": status,
        "scheduled_at": 0.0,
        "next_attempt_at": 0.0,
        "schedule_to_start_deadline": None,
        "schedule_to_close_deadline": None,
    }


def _schedule(store: Store, run_id: str, cmd: int) -> int:
    with store.transaction() as tx:
        stmt = SCHEDULE_ACTIVITY[tx.conn.dialect.name]
        task_id = int(tx.conn.execute(stmt, _task_row(run_id, cmd)).scalar_one())
        tx.add_job(activity_job(task_id, 1, activity="act"))
    return task_id


def test_a_start_numbers_the_run_and_a_second_start_writes_nothing(store: Store) -> None:
    first, created = _start(store, "wf-a", deadline_seconds=30.0)
    assert (first, created) == ("wf-a/1", True)
    again, created_again = _start(store, "wf-a")
    assert (again, created_again) == ("wf-a/1", False)

    [run] = rows(store, runs, runs.c.workflow_id == "wf-a")
    assert (run.status, run.active_key, run.history_length, run.pending_task) == (
        "running",
        "wf-a",
        1,
        True,
    )
    assert run.input == {"x": 1} and run.deadline_at == pytest.approx(run.created_at + 30.0)
    assert [e.type for e in rows(store, events, events.c.run_id == first)] == [ev.WORKFLOW_STARTED]
    assert len(rows(store, outbox, outbox.c.ref == first)) == 1


def test_a_start_after_the_run_closed_takes_the_next_number(store: Store) -> None:
    first, _ = _start(store, "wf-b")
    with store.transaction() as tx:
        tx.close_run(first, "completed", result=1)
    second, created = _start(store, "wf-b", continued_from=first)
    assert (second, created) == ("wf-b/2", True)
    [row] = rows(store, runs, runs.c.run_id == second)
    assert row.continued_from == first


def test_closing_a_run_stops_its_tasks_and_timers_and_clears_its_jobs(store: Store) -> None:
    run_id, _ = _start(store, "wf-c")
    queued = _schedule(store, run_id, 2)
    running = _schedule(store, run_id, 3)
    assert store.claim_activity(running, worker_id="w", code_version="v") is not None
    done = _schedule(store, run_id, 4)
    claim = store.claim_activity(done, worker_id="w", code_version="v")
    assert claim is not None
    store.complete_activity(done, claim.token, "ok")
    with store.transaction() as tx:
        tx.conn.execute(insert(timers).values(run_id=run_id, cmd=5, fire_at=10**10))
        tx.add_job(timer_job(run_id, 5, 10.0**10))

    with store.transaction() as tx:
        tx.close_run(run_id, "failed", error={"message": "boom"})
        retracted = len(tx.jobs)

    by_id = {t.id: t for t in rows(store, tasks, tasks.c.run_id == run_id)}
    assert (by_id[queued].status, by_id[queued].cancel_requested) == ("cancelled", False)
    assert by_id[queued].closed_at is not None
    assert (by_id[running].status, by_id[running].cancel_requested) == ("running", True)
    assert by_id[running].closed_at is None
    assert (by_id[done].status, by_id[done].cancel_requested) == ("completed", False)
    assert [t.status for t in rows(store, timers, timers.c.run_id == run_id)] == ["cancelled"]
    # No job of the run is left (the running task's was consumed by its claim).
    assert rows(store, outbox) == []
    assert retracted >= 3  # the timer's, the queued task's and the workflow task's jobs
    [run] = rows(store, runs, runs.c.run_id == run_id)
    assert (run.status, run.active_key, run.pending_task) == ("failed", None, False)


def test_a_claim_writes_its_attempt_and_consumes_its_job(store: Store) -> None:
    run_id, _ = _start(store, "wf-d")
    task_id = _schedule(store, run_id, 2)
    claim = store.claim_activity(task_id, worker_id="w1", code_version="v1", can_run={"act"})
    assert claim is not None and (claim.attempt, claim.token) == (1, 1)
    assert claim.input == {"i": 2} and claim.workflow_id == "wf-d"
    [attempt] = rows(store, attempts, attempts.c.task_id == task_id)
    assert (attempt.attempt, attempt.fencing_token, attempt.worker_id) == (1, 1, "w1")
    assert rows(store, outbox, outbox.c.kind == "activity") == []
    # Not due any more: a second claim takes nothing and writes nothing.
    assert store.claim_activity(task_id, worker_id="w2", code_version="v1") is None
    assert len(rows(store, attempts, attempts.c.task_id == task_id)) == 1


def test_a_claim_for_another_activity_writes_nothing(store: Store) -> None:
    run_id, _ = _start(store, "wf-e")
    task_id = _schedule(store, run_id, 2)
    assert store.claim_activity(task_id, worker_id="w", code_version="v", can_run={"x"}) is None
    assert rows(store, attempts, attempts.c.task_id == task_id) == []
    assert len(rows(store, outbox, outbox.c.kind == "activity")) == 1


def test_a_stale_completion_ends_no_attempt(store: Store) -> None:
    run_id, _ = _start(store, "wf-f")
    task_id = _schedule(store, run_id, 2)
    claim = store.claim_activity(task_id, worker_id="w", code_version="v")
    assert claim is not None
    with store.transaction() as tx:
        assert store._accept_result(tx, task_id, claim.token + 1, "late", "completed") is None
    [attempt] = rows(store, attempts, attempts.c.task_id == task_id)
    assert attempt.finished_at is None and attempt.outcome is None
    store.complete_activity(task_id, claim.token, "ok")
    [attempt] = rows(store, attempts, attempts.c.task_id == task_id)
    assert attempt.outcome == "completed" and attempt.error is None
    [task] = rows(store, tasks, tasks.c.id == task_id)
    assert (task.status, task.result) == ("completed", "ok")


def test_an_eager_schedule_writes_the_claimed_task_and_its_attempt(store: Store) -> None:
    run_id, _ = _start(store, "wf-g")
    run = store.find_run(run_id)
    assert run is not None
    offer = EagerOffer(worker_id="w", code_version="v", activities={"act"})
    row = _task_row(run_id, 2) | offer.claimed_row(OPTIONS, 100.0)
    command = HistoryCommand(
        cmd=2,
        type=ev.ACTIVITY_SCHEDULED,
        attrs={k: row[k] for k in ("activity", "operation_id", "input", "options")},
    )
    with store.transaction() as tx:
        task_id = store._insert_claimed(tx, row, run, command, offer)
        assert task_id is not None
        # The same operation id again: nothing written, nothing handed out.
        assert (
            store._insert_claimed(tx, dict(row), run, command, EagerOffer("w", "v", {"act"}))
            is None
        )
    assert offer.taken is not None and (offer.taken.task_id, offer.taken.token) == (task_id, 1)
    [task] = rows(store, tasks, tasks.c.run_id == run_id)
    assert (task.status, task.attempt, task.fencing_token, task.worker_id) == ("running", 1, 1, "w")
    [attempt] = rows(store, attempts, attempts.c.task_id == task_id)
    assert (attempt.attempt, attempt.fencing_token, attempt.worker_id) == (1, 1, "w")
    assert rows(store, outbox, outbox.c.kind == "activity") == []
