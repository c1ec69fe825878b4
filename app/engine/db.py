"""Database engines for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """Build an engine tuned for the runtime's short transactions."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # A database that stops answering (a network cut, not a refusal) must
        # fail a connection attempt, so the caller's retry can take over.
        connect_args={"connect_timeout": 5},
    )


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
        # deadlock upgrading read locks; busy_timeout then queues writers.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
