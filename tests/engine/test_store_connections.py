"""The store's connections on PostgreSQL without a ping per checkout
(app/engine/_db.py): a pooled connection the server dropped is survived; a
read is sent in autocommit and leaves no autocommit behind."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from app.engine._db import make_engine
from app.engine._store import Store

pytestmark = pytest.mark.postgres


def _kill_backends(admin_url: str, pids: list[int]) -> None:
    admin = make_engine(admin_url)
    try:
        with admin.begin() as conn:
            for pid in pids:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()


def test_a_read_survives_a_connection_the_server_dropped(postgres_url: str) -> None:
    """A connection used a moment ago (so not pinged at checkout) whose server
    process was terminated: the read fails on it as a disconnect, and runs
    again on a fresh connection instead of reaching the caller."""
    engine = make_engine(postgres_url, pool_size=1)
    store = Store(engine)
    try:
        with engine.connect() as conn:
            pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        _kill_backends(postgres_url, [pid])

        assert store.find_run("no-such-run") is None

        with engine.connect() as conn:
            fresh = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        assert fresh != pid
    finally:
        engine.dispose()


def test_an_idle_connection_is_pinged_and_replaced(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection idle past IDLE_PING whose server process was terminated is
    replaced at checkout, before any statement runs on it."""
    monkeypatch.setattr("app.engine._db.IDLE_PING", 0.0)
    engine = make_engine(postgres_url, pool_size=1)
    try:
        with engine.connect() as conn:
            pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        _kill_backends(postgres_url, [pid])

        with engine.connect() as conn:
            fresh = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        assert fresh != pid
    finally:
        engine.dispose()


def test_a_read_is_in_autocommit_and_the_next_transaction_is_not(postgres_url: str) -> None:
    """A read sends no BEGIN or ROLLBACK (``Store.reading``), and the pooled
    connection it leaves behind is a transactional one again: a transaction
    on it that fails writes nothing."""
    engine = make_engine(postgres_url, pool_size=1)
    store = Store(engine)
    modes: list[object] = []

    def on_begin(conn: Any) -> None:
        modes.append(conn.get_execution_options().get("isolation_level"))

    event.listen(engine, "begin", on_begin)
    try:
        assert store.find_run("no-such-run") is None
        assert modes == ["AUTOCOMMIT"]
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.start_run(workflow_name="wf", workflow_version=1, workflow_id="wf-ac", input=None)
            raise RuntimeError("rolled back")
        assert modes == ["AUTOCOMMIT", None]
        assert store.find_run("wf-ac") is None
    finally:
        event.remove(engine, "begin", on_begin)
        engine.dispose()
