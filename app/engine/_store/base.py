"""The store's engine, clock and transaction helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from app.engine._db import READ_ONLY
from app.engine._faults import FaultPoints
from app.engine._store.tx import Tx


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
    def transaction(self) -> Iterator[Tx]:
        with self.engine.begin() as conn:
            tx = Tx(conn, self.clock())
            yield tx
            tx.flush_events()

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads only: on SQLite its transaction does not take
        the write lock (see ``app/engine/_db.py``), so readers never queue
        behind writers. Nothing written on it may be committed."""
        with self.engine.connect() as conn:
            yield conn.execution_options(**{READ_ONLY: True})
