"""The store's engine, clock and transaction helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine

from app.engine.faults import FaultPoints
from app.engine.store.tx import Tx


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
            yield Tx(conn, self.clock())
