"""A tiny external "ticket service" for the classic recovery experiment.

It lives in its own SQLite file, outside the runtime's database, so that what
it holds is evidence the runtime's bookkeeping cannot fake. Creating a ticket
is idempotent by operation id: the ticket and its unique operation id are
stored in one transaction, and a second create with the same id returns the
first ticket. Every call is also logged (``calls``), so a test can tell a
retry that was answered from the store apart from one that never came.

Standard library only: worker processes and the test process each open the
file themselves; SQLite's own locking serialises them.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    created INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Ticket:
    id: int
    operation_id: str
    title: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Call:
    operation_id: str
    pid: int
    created: bool


class TicketService:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        with self._connect() as conn:
            conn.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def create_ticket(self, operation_id: str, title: str) -> Ticket:
        """Create the ticket for ``operation_id`` once; later calls return it."""
        with self._connect() as conn:
            # IMMEDIATE: the check and the insert are one step against other processes.
            conn.execute("BEGIN IMMEDIATE")
            inserted = conn.execute(
                "INSERT INTO tickets (operation_id, title) VALUES (?, ?) "
                "ON CONFLICT (operation_id) DO NOTHING",
                (operation_id, title),
            ).rowcount
            conn.execute(
                "INSERT INTO calls (operation_id, pid, created) VALUES (?, ?, ?)",
                (operation_id, os.getpid(), inserted),
            )
            row = conn.execute(
                "SELECT id, operation_id, title FROM tickets WHERE operation_id = ?",
                (operation_id,),
            ).fetchone()
            conn.execute("COMMIT")
        return Ticket(*row)

    def find(self, operation_id: str) -> Ticket | None:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT id, operation_id, title FROM tickets WHERE operation_id = ?",
                (operation_id,),
            ).fetchone()
        return Ticket(*row) if row else None

    def tickets(self) -> list[Ticket]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, operation_id, title FROM tickets ORDER BY id"
            ).fetchall()
        return [Ticket(*r) for r in rows]

    def calls(self) -> list[Call]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT operation_id, pid, created FROM calls ORDER BY id"
            ).fetchall()
        return [Call(op, pid, bool(created)) for op, pid, created in rows]
