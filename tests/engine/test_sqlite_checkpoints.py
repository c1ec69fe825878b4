"""SQLite's WAL checkpoints taken out of a COMMIT (app/engine/_db.py):
``Store.transaction(checkpoint=False)`` commits without checkpointing, its
connection gets the automatic checkpoint back in the pool, and
``checkpoint_wal`` copies the WAL back into the database beside writers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from app.engine import checkpoint_wal
from app.engine._db import WAL_AUTOCHECKPOINT, make_engine
from app.engine._store import Store

#: Twice SQLite's automatic checkpoint threshold (1,000 pages of 4 KiB).
ROWS, ROW_BYTES = 64, 128 * 1024


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)"))
    yield engine
    engine.dispose()


def _write(store: Store, *, checkpoint: bool) -> None:
    for n in range(ROWS):
        with store.transaction(checkpoint=checkpoint) as tx:
            tx.conn.execute(
                text("INSERT INTO blobs (data) VALUES (:data)"), {"data": bytes([n]) * ROW_BYTES}
            )


def _wal_bytes(tmp_path: Path) -> int:
    return (tmp_path / "db.sqlite-wal").stat().st_size


def _db_bytes(tmp_path: Path) -> int:
    return (tmp_path / "db.sqlite").stat().st_size


def test_commits_without_checkpoint_leave_the_wal_to_grow(engine: Engine, tmp_path: Path) -> None:
    _write(Store(engine), checkpoint=False)
    assert _wal_bytes(tmp_path) > ROWS * ROW_BYTES  # every page still in the WAL
    assert _db_bytes(tmp_path) < ROW_BYTES  # none copied back


def test_commits_checkpoint_as_usual_by_default(engine: Engine, tmp_path: Path) -> None:
    _write(Store(engine), checkpoint=True)
    assert _wal_bytes(tmp_path) < ROWS * ROW_BYTES * 3 // 4
    assert _db_bytes(tmp_path) > ROWS * ROW_BYTES // 2


def test_the_connection_checkpoints_again_back_in_the_pool(engine: Engine) -> None:
    store = Store(engine)
    with store.transaction(checkpoint=False) as tx:
        inside = tx.conn.execute(text("PRAGMA wal_autocheckpoint")).scalar_one()
    assert inside == 0
    # One connection in the pool, used again: its setting is SQLite's own again.
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar_one() == WAL_AUTOCHECKPOINT


def test_an_invalidated_connection_goes_back_without_a_word(engine: Engine) -> None:
    """A connection invalidated inside such a transaction returns to the pool
    with no driver connection left to reset: nothing is run on it."""
    store = Store(engine)
    with pytest.raises(Exception, match="invalid"), store.transaction(checkpoint=False) as tx:
        tx.conn.invalidate()
    with store.transaction() as tx:
        assert tx.conn.execute(text("PRAGMA wal_autocheckpoint")).scalar_one() == WAL_AUTOCHECKPOINT


def test_checkpoint_wal_copies_the_wal_back(engine: Engine, tmp_path: Path) -> None:
    store = Store(engine)
    _write(store, checkpoint=False)
    assert _db_bytes(tmp_path) < ROW_BYTES
    checkpoint_wal(engine)
    assert _db_bytes(tmp_path) > ROWS * ROW_BYTES
    # The next writer starts the WAL over instead of growing it.
    size = _wal_bytes(tmp_path)
    _write(store, checkpoint=False)
    assert _wal_bytes(tmp_path) == size
