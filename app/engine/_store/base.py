"""The store's engine, clock and transaction helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine

from app.engine._db import NO_CHECKPOINT, READ_ONLY
from app.engine._faults import FaultPoints
from app.engine._store.tx import Tx

_NO_CHECKPOINT = {NO_CHECKPOINT: True}


class StoreBase:
    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.time,
        faults: FaultPoints | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.faults = faults or FaultPoints()

    @contextmanager
    def transaction(self, *, checkpoint: bool = True) -> Iterator[Tx]:
        """``checkpoint=False`` (SQLite): its COMMIT does not checkpoint the
        WAL, whoever calls ``checkpoint_wal`` instead (app/engine/_db.py)."""
        engine = self.engine if checkpoint else self.engine.execution_options(**_NO_CHECKPOINT)
        with engine.begin() as conn:
            tx = Tx(conn, self.clock())
            yield tx
            tx.flush_events()

    @contextmanager
    def one_statement(self) -> Iterator[Tx]:
        """For a write that is exactly one statement, on PostgreSQL: the
        connection is in autocommit, so the statement is its own transaction
        and costs one round trip, without ``BEGIN`` and ``COMMIT``. Nothing
        may be deferred on it (``Tx.defer_event``)."""
        with self.engine.connect() as conn:
            yield Tx(conn.execution_options(isolation_level="AUTOCOMMIT"), self.clock())

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads only: on SQLite its transaction does not take
        the write lock (see ``app/engine/_db.py``), so readers never queue
        behind writers. On PostgreSQL it is in autocommit: at read committed
        every statement reads a snapshot of its own, in a transaction or not,
        so ``BEGIN`` and the closing ``ROLLBACK`` would buy nothing but two
        round trips. Nothing may be written on it (on PostgreSQL a write would
        commit at once)."""
        options: dict[str, Any] = {READ_ONLY: True}
        if self.engine.dialect.name == "postgresql":
            options["isolation_level"] = "AUTOCOMMIT"
        with self.engine.connect() as conn:
            yield conn.execution_options(**options)
