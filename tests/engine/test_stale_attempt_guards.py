"""Recovery test 3's guards, one at a time: a write from an attempt that no
longer holds its task is refused on two separate conditions.

``test_crash_recovery.py::test_paused_stale_worker_completion_is_rejected``
thaws a frozen worker after the next attempt finished: its token is old
*and* the task is no longer running, so it fails only when both conditions
are removed. Each test here breaks exactly one:

- the token: a stale worker writes while the task is running again, under
  the next attempt's token;
- the status: a worker writes with the current token after the reconciler
  took the attempt back (lease expired, retry scheduled, token unchanged
  until the next claim).

Each runs for the three writes an attempt makes (completion, heartbeat,
failure), on SQLite and PostgreSQL, through the store's own methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select

from app.engine._errors import StaleLease
from app.engine._jobs import activity_job
from app.engine._policy import ActivityOptions, RetryPolicy, Timeouts
from app.engine._store import STALE_WRITES, Store
from app.engine._store.rows import Claim, Failure
from app.engine._store.schema import tasks
from app.engine._store.statements import SCHEDULE_ACTIVITY

OPTIONS = ActivityOptions(timeouts=Timeouts(start_to_close=60.0), retry=RetryPolicy(max_attempts=5))
LEASE_LOST = Failure("transient", "HeartbeatTimeout", "attempt lease expired")

#: One write of an attempt, by its token: each raises StaleLease when refused.
Write = Callable[[Store, int, int], object]
WRITES: dict[str, Write] = {
    "completion": lambda store, task, token: store.complete_activity(task, token, "late"),
    "heartbeat": lambda store, task, token: store.heartbeat(task, token, {"late": True}),
    "failure": lambda store, task, token: store.fail_activity(
        task, token, Failure("transient", "Late", "late failure")
    ),
}


@pytest.fixture
def store(db_engine: Engine) -> Store:
    return Store(db_engine)


def _scheduled_task(store: Store) -> int:
    with store.transaction() as tx:
        run_id = tx.start_run(
            workflow_name="wf", workflow_version=1, workflow_id="stale", input=None
        ).run_id
        row = {
            "run_id": run_id,
            "cmd": 1,
            "activity": "act",
            "operation_id": f"{run_id}:1",
            "input": None,
            "input_hash": "h",
            "options": OPTIONS.to_json(),
            "has_reconcile": False,
            "status": "scheduled",
            "scheduled_at": 0.0,
            "next_attempt_at": 0.0,
            "schedule_to_start_deadline": None,
            "schedule_to_close_deadline": None,
        }
        task_id = int(tx.conn.execute(SCHEDULE_ACTIVITY[tx.conn.dialect.name], row).scalar_one())
        tx.add_job(activity_job(task_id, 1, activity="act"))
    return task_id


def _claim(store: Store, task_id: int, worker: str) -> Claim:
    claim = store.claim_activity(task_id, worker_id=worker, code_version="v")
    assert claim is not None
    return claim


def _task(store: Store, task_id: int) -> Any:
    with store.reading() as conn:
        return conn.execute(select(tasks).where(tasks.c.id == task_id)).one()


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_stale_token_is_refused_while_the_next_attempt_runs(store: Store, write: str) -> None:
    """Attempt 1 lost its lease and attempt 2 runs: the task is ``running``,
    so only the token tells attempt 1's late write from attempt 2's."""
    task_id = _scheduled_task(store)
    first = _claim(store, task_id, "A")
    retry_now = Failure("transient", "HeartbeatTimeout", "lease expired", next_retry_delay=0.0)
    store.fail_activity(task_id, first.token, retry_now)
    second = _claim(store, task_id, "B")
    assert (second.attempt, second.token) == (2, first.token + 1)

    with pytest.raises(StaleLease):
        WRITES[write](store, task_id, first.token)

    row = _task(store, task_id)
    assert (row.status, row.fencing_token, row.attempt) == ("running", second.token, 2)
    assert row.result is None and row.heartbeat_details is None
    assert store.counter(STALE_WRITES) == 1
    # Attempt 2 still holds the task: its own completion is the one accepted.
    store.complete_activity(task_id, second.token, "fresh")
    assert (_task(store, task_id).status, _task(store, task_id).result) == ("completed", "fresh")


@pytest.mark.parametrize("write", sorted(WRITES))
def test_the_current_token_is_refused_once_the_attempt_was_taken_back(
    store: Store, write: str
) -> None:
    """The reconciler recorded attempt 1's lease as lost and scheduled a retry:
    the token is still attempt 1's until the next claim, so only the task's
    status (``scheduled``, not ``running``) refuses attempt 1's late write."""
    task_id = _scheduled_task(store)
    first = _claim(store, task_id, "A")
    store.fail_activity(task_id, first.token, LEASE_LOST)
    taken_back = _task(store, task_id)
    assert (taken_back.status, taken_back.fencing_token) == ("scheduled", first.token)

    with pytest.raises(StaleLease):
        WRITES[write](store, task_id, first.token)

    row = _task(store, task_id)
    assert (row.status, row.fencing_token, row.attempt) == ("scheduled", first.token, 1)
    assert row.result is None and row.heartbeat_details is None
    assert row.next_attempt_at == taken_back.next_attempt_at  # the retry stays as planned
    assert store.counter(STALE_WRITES) == 1
