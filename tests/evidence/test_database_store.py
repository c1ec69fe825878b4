"""Evidence in the database (the default), on SQLite and PostgreSQL: content
addressing, compression, the size cap with its marker, checked reads, and
reads by a second process's store."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select, update

from app.engine._db import make_engine
from app.evidence import (
    DatabaseEvidenceStore,
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceRef,
    FolderEvidenceStore,
)
from app.evidence.base import cap
from app.evidence.database import blobs


def stored_row(engine: Engine, sha: str) -> dict[str, object]:
    with engine.connect() as conn:
        row = conn.execute(select(blobs).where(blobs.c.sha256 == sha)).mappings().one()
    return dict(row)


def test_put_stores_compressed_by_sha256_and_any_store_reads_it(
    db_engine: Engine, db_url: str
) -> None:
    store = DatabaseEvidenceStore(db_engine)
    data = b"Traceback (most recent call last):\n  AssertionError: -1\n" * 200
    ref = store.put(data, kind="test-log", name="verify.log")
    sha = hashlib.sha256(data).hexdigest()
    assert ref == EvidenceRef(sha256=sha, size=len(data), kind="test-log", name="verify.log")
    row = stored_row(db_engine, sha)
    assert row["encoding"] == "zlib" and len(row["data"]) < len(data) // 10  # type: ignore[arg-type]
    assert zlib.decompress(row["data"]) == data  # type: ignore[arg-type]
    # Another process (another engine, another pool) reads the same artifact.
    other_engine = make_engine(db_url)
    try:
        other = DatabaseEvidenceStore(other_engine)
        assert other.exists(sha) and other.get_ref(ref) == data
    finally:
        other_engine.dispose()


def test_incompressible_bytes_are_stored_as_given(db_engine: Engine) -> None:
    store = DatabaseEvidenceStore(db_engine)
    data = os.urandom(4096)
    ref = store.put(data, kind="screenshot", name="s.png")
    assert stored_row(db_engine, ref.sha256)["encoding"] == "identity"
    assert store.get(ref.sha256) == data


def test_put_is_idempotent_and_moves_last_put_at(db_engine: Engine) -> None:
    now = [1000.0]
    store = DatabaseEvidenceStore(db_engine, clock=lambda: now[0])
    first = store.put(b"same bytes", kind="patch", name="a.patch")
    now[0] = 2000.0
    second = store.put(b"same bytes", kind="test-log", name="b.log")
    assert first.sha256 == second.sha256 and (first.kind, second.kind) == ("patch", "test-log")
    row = stored_row(db_engine, first.sha256)
    assert (row["created_at"], row["last_put_at"]) == (1000.0, 2000.0)
    with db_engine.connect() as conn:
        assert len(conn.execute(select(blobs.c.sha256)).all()) == 1


def test_concurrent_writers_of_the_same_artifact_agree(db_engine: Engine) -> None:
    store = DatabaseEvidenceStore(db_engine)
    data = os.urandom(64 * 1024)
    refs: list[EvidenceRef] = []
    errors: list[BaseException] = []

    def put() -> None:
        try:
            refs.append(store.put(data, kind="k", name="n"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len({ref.sha256 for ref in refs}) == 1 and len(refs) == 6
    assert store.get(refs[0].sha256) == data


def test_altered_or_undecodable_rows_are_corrupt_and_absent_ones_missing(
    db_engine: Engine,
) -> None:
    store = DatabaseEvidenceStore(db_engine)
    ref = store.put(b"exit 1\n" * 50, kind="test-log", name="t.log")
    with db_engine.begin() as conn:
        conn.execute(
            update(blobs)
            .where(blobs.c.sha256 == ref.sha256)
            .values(data=zlib.compress(b"exit 0\n" * 50))
        )
    with pytest.raises(EvidenceCorrupt, match="altered"):
        store.get(ref.sha256)
    with db_engine.begin() as conn:
        conn.execute(update(blobs).where(blobs.c.sha256 == ref.sha256).values(data=b"garbage"))
    with pytest.raises(EvidenceCorrupt, match="cannot be decoded"):
        store.get(ref.sha256)
    with pytest.raises(EvidenceMissing):
        store.get("0" * 64)
    assert not store.exists("0" * 64)
    for bad in ("../../etc/passwd", "ABC", "0" * 63, "g" * 64):
        with pytest.raises(ValueError):
            store.get(bad)


def test_an_oversize_artifact_is_cut_with_a_marker_never_silently(db_engine: Engine) -> None:
    store = DatabaseEvidenceStore(db_engine, max_bytes=4096)
    data = b"".join(f"line {i}\n".encode() for i in range(5000))
    ref = store.put(data, kind="test-log", name="huge.log")
    kept = store.get_ref(ref)
    assert ref.size == len(kept) <= 4096
    assert ref.sha256 == hashlib.sha256(kept).hexdigest()
    assert kept.startswith(b"line 0\nline 1\n") and kept.endswith(b"line 4999\n")
    assert f"The artifact was {len(data)} bytes".encode() in kept
    row = stored_row(db_engine, ref.sha256)
    assert (row["size"], row["original_size"]) == (len(kept), len(data))
    # At the cap exactly: stored whole.
    exact = b"x" * 4096
    assert store.get_ref(store.put(exact, kind="k", name="n")) == exact


def test_the_folder_store_applies_the_same_cap(tmp_path: object) -> None:
    store = FolderEvidenceStore(tmp_path, max_bytes=2048)  # type: ignore[arg-type]
    ref = store.put(b"y" * 10_000, kind="k", name="n")
    kept = store.get_ref(ref)
    assert len(kept) <= 2048 and b"10000 bytes" in kept


@given(st.binary(max_size=20_000), st.integers(min_value=1024, max_value=8192))
def test_cap_keeps_head_and_tail_and_fits(data: bytes, limit: int) -> None:
    kept = cap(data, limit)
    if len(data) <= limit:
        assert kept == data
        return
    assert len(kept) <= limit and b"bytes omitted here" in kept
    head, _, rest = kept.partition(b"\n\n[repairbot: ")
    tail = rest.split(b"are kept.]\n\n", 1)[1]
    assert data.startswith(head) and data.endswith(tail)
    omitted = int(rest.split(b" bytes omitted", 1)[0])
    assert len(head) + omitted + len(tail) == len(data)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=4096))
def test_any_bytes_round_trip(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("ev") / "ev.db"
    shutil.copy(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    try:
        store = DatabaseEvidenceStore(engine)
        ref = store.put(data, kind="k", name="n")
        assert ref.size == len(data) and store.get(ref.sha256) == data
    finally:
        engine.dispose()
