"""The folder store (an explicit option): content addressing, atomic idempotent
writes, tamper detection."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceRef
from app.evidence import FolderEvidenceStore as EvidenceStore


def test_put_stores_by_sha256_and_get_returns_the_bytes(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    data = b"Traceback (most recent call last):\n  AssertionError: -1\n"
    ref = store.put(data, kind="reproduction-log", name="reproduce-on-base.log")
    sha = hashlib.sha256(data).hexdigest()
    assert ref == EvidenceRef(sha256=sha, size=len(data), kind="reproduction-log", name=ref.name)
    assert store.path(sha) == tmp_path / sha[:2] / sha
    assert store.exists(sha) and store.get(sha) == data


def test_put_is_idempotent_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    first = store.put(b"same bytes", kind="patch", name="a.patch")
    second = store.put(b"same bytes", kind="test-log", name="b.log")
    assert first.sha256 == second.sha256 and (first.kind, second.kind) == ("patch", "test-log")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files == [store.path(first.sha256)]


def test_concurrent_writers_of_the_same_artifact_agree(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    data = os.urandom(256 * 1024)
    refs: list[EvidenceRef] = []
    threads = [
        threading.Thread(target=lambda: refs.append(store.put(data, kind="k", name="n")))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({ref.sha256 for ref in refs}) == 1
    assert store.get(refs[0].sha256) == data
    assert [p.name for p in store.path(refs[0].sha256).parent.iterdir()] == [refs[0].sha256]


def test_altered_content_is_detected_on_read_and_repaired_by_a_put(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    ref = store.put(b"exit 1\n", kind="test-log", name="t.log")
    path = store.path(ref.sha256)
    path.chmod(0o644)
    path.write_bytes(b"exit 0\n")  # same size, different content
    with pytest.raises(EvidenceCorrupt, match="altered"):
        store.get(ref.sha256)
    store.put(b"exit 1\n", kind="test-log", name="t.log")
    assert store.get(ref.sha256) == b"exit 1\n"


def test_missing_evidence_and_malformed_hashes(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    with pytest.raises(EvidenceMissing):
        store.get("0" * 64)
    assert not store.exists("0" * 64)
    for bad in ("../../etc/passwd", "ABC", "0" * 63, "g" * 64):
        with pytest.raises(ValueError):
            store.path(bad)


def test_stored_artifacts_are_read_only(tmp_path: Path) -> None:
    ref = EvidenceStore(tmp_path).put(b"x", kind="k", name="n")
    assert (EvidenceStore(tmp_path).path(ref.sha256).stat().st_mode & 0o222) == 0


def test_a_ref_round_trips_through_json(tmp_path: Path) -> None:
    ref = EvidenceStore(tmp_path).put(b"x", kind="patch", name="fix.patch")
    assert EvidenceRef.model_validate_json(ref.model_dump_json()) == ref


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=4096))
def test_any_bytes_round_trip(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    store = EvidenceStore(tmp_path_factory.mktemp("ev"))
    ref = store.put(data, kind="k", name="n")
    assert ref.size == len(data) and store.get(ref.sha256) == data
