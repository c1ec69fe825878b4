"""Database engines for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import NullPool

#: Execution option of a connection that only reads (``Store.reading``).
READ_ONLY = "repairbot_read_only"
#: Execution option (SQLite): this transaction's COMMIT leaves the WAL's
#: checkpoint to someone else (``checkpoint_wal``). SQLite runs a checkpoint
#: inside the COMMIT that finds the WAL over its size (copying the pages back
#: and syncing the database file), so the writer that commits pays it while
#: everything queued behind it waits. The connection gets its automatic
#: checkpoint back when it returns to the pool.
NO_CHECKPOINT = "repairbot_no_checkpoint"
#: SQLite's own default for ``PRAGMA wal_autocheckpoint`` (pages).
WAL_AUTOCHECKPOINT = 1000


#: Seconds after which a pooled PostgreSQL connection is replaced.
POOL_RECYCLE = 300
#: A PostgreSQL connection idle in the pool for longer is pinged at checkout.
IDLE_PING = 1.0
_RETURNED_AT = "repairbot_returned_at"


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """Build an engine tuned for the runtime's short transactions."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        # The most recently returned connection is handed out first, so under
        # load a few connections stay busy (never idle long enough to need
        # the ping below) and the rest sit idle.
        pool_use_lifo=True,
        # Recycling bounds how stale an idle connection can get behind a proxy
        # or firewall that drops it silently.
        pool_recycle=POOL_RECYCLE,
        # A database that stops answering (a network cut, not a refusal) must
        # fail a connection attempt, so the caller's retry can take over.
        connect_args={"connect_timeout": 5},
    )
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout only when it sat idle for longer
    than ``IDLE_PING`` seconds (``pool_pre_ping`` pings every checkout: a round
    trip each, five per step on the hot path). An idle connection is the one a
    server restart or failover may have killed unnoticed; a dead one is
    replaced before anyone uses it. A connection in use when the server went
    away fails its statement as a disconnect instead: that invalidates the
    whole pool, and the worker's store calls retry transient errors
    (app/engine/_db_retry.py)."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned_at = record.info.get(_RETURNED_AT)
        if returned_at is None or time.monotonic() - returned_at <= IDLE_PING:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"idle connection failed its ping: {exc}") from exc
        if not alive:  # pragma: no cover - psycopg raises rather than answer False
            raise DisconnectionError("idle connection failed its ping")


def _sqlite_engine(url: str) -> Engine:
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        poolclass=NullPool if path == ":memory:" else None,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transactions into our own hands (see _on_begin).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # BEGIN IMMEDIATE takes the write lock up front, so two processes never
        # deadlock upgrading read locks; busy_timeout then queues writers. A
        # read-only transaction never upgrades, so it takes no lock (WAL gives
        # it a snapshot) and does not queue behind writers.
        options = conn.get_execution_options()
        if options.get(READ_ONLY):
            conn.exec_driver_sql("BEGIN DEFERRED")
            return
        if options.get(NO_CHECKPOINT):
            conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
            conn.connection.info[NO_CHECKPOINT] = True
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, record: Any) -> None:
        # Back in the pool: the next user's COMMIT checkpoints as usual.
        if record.info.pop(NO_CHECKPOINT, False) and dbapi_connection is not None:
            dbapi_connection.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")

    return engine


def checkpoint_wal(engine: Engine) -> None:
    """SQLite: copy the WAL's committed pages back into the database, as far
    as readers allow, without taking the write lock (a PASSIVE checkpoint):
    writers go on meanwhile. Blocking: call it on a thread."""
    raw = engine.raw_connection()
    try:
        # The driver's connection is in autocommit (see _on_connect): no BEGIN.
        raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # type: ignore[union-attr]
    finally:
        raw.close()
