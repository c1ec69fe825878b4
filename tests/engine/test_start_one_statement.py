"""A run's start on both databases: on PostgreSQL the run's row, its
``workflow_started`` event and its first workflow task's job are one
statement (``START_AND_QUEUE``, app/engine/_store/combined.py), which must
write what the separate statements write, nothing when a run is active for
the workflow id, and nothing once the caller's transaction is rolled back.
A client's start is that statement alone, in autocommit."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, event, insert

from app.engine import _history_commands as ev
from app.engine._client import RuntimeClient
from app.engine._jobs import WORKFLOW_TASK, workflow_queue, workflow_task_job
from app.engine._store import Store
from app.engine._store.schema import events, outbox, runs
from tests.engine.store_rows import rows
from tests.engine.test_client import registry


def _start(store: Store, workflow_id: str, **kwargs: Any) -> Any:
    with store.transaction() as tx:
        started = tx.start_run(
            workflow_name="wf",
            workflow_version=3,
            workflow_id=workflow_id,
            input={"a": 1},
            **kwargs,
        )
    return started, tx.jobs


def test_a_start_writes_the_run_its_event_and_its_job(store: Store) -> None:
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        started, jobs = _start(store, "wf-s", operator={"action": "retry", "by": "me"})
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert (started.run_id, started.created) == ("wf-s/1", True)
    if store.engine.dialect.name == "postgresql":
        assert len(statements) == 1
    queue = workflow_queue("wf", 3)
    assert jobs == [workflow_task_job("wf-s/1", 1, queue)]
    [run] = rows(store, runs, runs.c.run_id == "wf-s/1")
    assert (run.status, run.active_key, run.history_length, run.pending_task) == (
        "running",
        "wf-s",
        1,
        True,
    )
    assert (run.input, run.deadline_notified, run.workflow_version) == ({"a": 1}, False, 3)
    [first] = rows(store, events, events.c.run_id == "wf-s/1")
    assert (first.seq, first.type, first.created_at) == (1, ev.WORKFLOW_STARTED, run.created_at)
    assert first.data == {
        "input": {"a": 1},
        "workflow": "wf",
        "version": 3,
        "workflow_id": "wf-s",
        "operator": {"action": "retry", "by": "me"},
    }
    [job] = rows(store, outbox)
    assert (job.job_id, job.kind, job.ref, job.queue) == (
        "wft:wf-s/1:1",
        WORKFLOW_TASK,
        "wf-s/1",
        queue,
    )
    assert (job.not_before, job.relays, job.created_at, job.relay_at) == (
        0.0,
        0,
        run.created_at,
        run.created_at,
    )


def test_a_start_while_a_run_is_active_writes_nothing(store: Store) -> None:
    _start(store, "wf-twice")
    started, jobs = _start(store, "wf-twice")
    assert (started.run_id, started.created, jobs) == ("wf-twice/1", False, [])
    assert len(rows(store, runs)) == 1
    assert len(rows(store, events)) == 1
    assert len(rows(store, outbox)) == 1


def test_a_leftover_job_of_the_same_id_does_not_refuse_the_start(store: Store) -> None:
    with store.transaction() as tx:
        tx.conn.execute(
            insert(outbox).values(
                job_id="wft:wf-left/1:1",
                kind=WORKFLOW_TASK,
                ref="wf-left/1",
                queue="q",
                not_before=0.0,
                created_at=0.0,
            )
        )
    started, _jobs = _start(store, "wf-left")
    assert started.created
    assert len(rows(store, events, events.c.run_id == "wf-left/1")) == 1


def test_a_start_rolled_back_with_its_callers_transaction_leaves_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError, match="intake failed"), store.transaction() as tx:
        tx.start_run(workflow_name="wf", workflow_version=1, workflow_id="wf-rb", input=None)
        raise RuntimeError("intake failed")
    assert (rows(store, runs), rows(store, events), rows(store, outbox)) == ([], [], [])


async def test_a_clients_start_is_its_own_transaction(db_engine: Engine) -> None:
    client = RuntimeClient(db_engine, registry())
    modes: list[Any] = []

    def on_begin(conn: Any) -> None:
        modes.append(conn.get_execution_options().get("isolation_level"))

    event.listen(db_engine, "begin", on_begin)
    try:
        started = await client.start_workflow("doubles", "wf-client", 2)
        again = await client.start_workflow("doubles", "wf-client", 2)
    finally:
        event.remove(db_engine, "begin", on_begin)
    assert (started.created, again.created, again.run_id) == (True, False, started.run_id)
    postgres = db_engine.dialect.name == "postgresql"
    assert modes == (["AUTOCOMMIT", "AUTOCOMMIT"] if postgres else [None, None])
    run = client.store.find_run("wf-client")
    assert run is not None and (run.status, run.input) == ("running", 2)
