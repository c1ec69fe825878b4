"""``Store.load_task``, what a workflow task reads, on both databases: on
PostgreSQL one statement (``LOAD_TASK``), which must read what the two
statements read: the run, and while it is open its events after the ones
the caller holds, up to the history length the run row says."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, insert

from app.engine import _history_commands as ev
from app.engine._store import Store
from app.engine._store.schema import events


def _started(store: Store, workflow_id: str, signals: int) -> str:
    with store.transaction() as tx:
        run_id = tx.start_run(
            workflow_name="wf", workflow_version=1, workflow_id=workflow_id, input={"x": [1, 2.5]}
        ).run_id
        for n in range(signals):
            tx.append_event(run_id, ev.SIGNAL_RECEIVED, {"name": f"s{n}", "payload": {"n": n}})
    return run_id


def test_a_task_reads_its_run_and_the_events_it_lacks(store: Store) -> None:
    run_id = _started(store, "wf-load", signals=2)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        run, found = store.load_task(run_id, after=1)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    if store.engine.dialect.name == "postgresql":
        assert len(statements) == 1
    assert run is not None and (run.run_id, run.history_length, run.input) == (
        run_id,
        3,
        {"x": [1, 2.5]},
    )
    assert [(e.seq, e.type, e.data) for e in found] == [
        (2, ev.SIGNAL_RECEIVED, {"name": "s0", "payload": {"n": 0}}),
        (3, ev.SIGNAL_RECEIVED, {"name": "s1", "payload": {"n": 1}}),
    ]
    run, everything = store.load_task(run_id)
    assert [e.seq for e in everything] == [1, 2, 3]
    assert everything[0].data["input"] == {"x": [1, 2.5]}
    assert store.load_task(run_id, after=3)[1] == []


def test_events_past_the_history_length_read_are_left_out(store: Store) -> None:
    """An event written after the run row was read (its history length not
    yet seen) is not the task's to replay: its guarded commit expects the
    length it read."""
    run_id = _started(store, "wf-ahead", signals=0)
    with store.transaction() as tx:
        tx.conn.execute(
            insert(events).values(
                run_id=run_id, seq=2, type=ev.SIGNAL_RECEIVED, data={}, created_at=0.0
            )
        )
    run, found = store.load_task(run_id)
    assert run is not None and run.history_length == 1
    assert [e.seq for e in found] == [1]


def test_a_closed_run_comes_without_events(store: Store) -> None:
    run_id = _started(store, "wf-closed", signals=1)
    with store.transaction() as tx:
        tx.terminate(run_id, "stop")
    run, found = store.load_task(run_id)
    assert run is not None and run.status == "terminated"
    assert found == []


def test_an_unknown_run_reads_as_none(store: Store) -> None:
    assert store.load_task("no-such-run") == (None, [])
