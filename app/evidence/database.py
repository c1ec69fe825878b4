"""Evidence in the database (the default): every worker machine and the web
process read what any worker wrote, with nothing to mount or sync.

Bytes are zlib-compressed (logs shrink several times over) unless that does
not help. A put of bytes already stored only moves ``last_put_at``, which is
what keeps a fresh write safe from the collector (see
:mod:`app.evidence.collect`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

from sqlalchemy import Engine, exists, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.app_tables import EvidenceBlob
from app.evidence.base import DEFAULT_MAX_BYTES, EvidenceCorrupt, EvidenceMissing, EvidenceStore

blobs = EvidenceBlob.__table__  # type: ignore[attr-defined]

#: zlib level: 6 is zlib's own default, most of level 9's gain at a third of its time.
COMPRESSION_LEVEL = 6


def encode(data: bytes) -> tuple[str, bytes]:
    packed = zlib.compress(data, COMPRESSION_LEVEL)
    return ("zlib", packed) if len(packed) < len(data) else ("identity", data)


def decode(encoding: str, stored: bytes) -> bytes:
    if encoding == "zlib":
        return zlib.decompress(stored)
    if encoding == "identity":
        return stored
    raise ValueError(f"unknown evidence encoding {encoding!r}")


class DatabaseEvidenceStore(EvidenceStore):
    def __init__(
        self,
        engine: Engine,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(max_bytes=max_bytes)
        self.engine = engine
        self.clock = clock

    def __repr__(self) -> str:
        return f"DatabaseEvidenceStore({self.engine.url.render_as_string(hide_password=True)!r})"

    def _store(self, sha: str, data: bytes, *, original_size: int) -> None:
        now = self.clock()
        with self.engine.begin() as conn:
            touched = conn.execute(
                update(blobs).where(blobs.c.sha256 == sha).values(last_put_at=now)
            ).rowcount
        if touched:
            return
        encoding, stored = encode(data)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(blobs).values(
                        sha256=sha,
                        size=len(data),
                        original_size=original_size,
                        encoding=encoding,
                        data=stored,
                        created_at=now,
                        last_put_at=now,
                    )
                )
        except IntegrityError:
            pass  # another writer stored the same bytes at the same moment

    def _load(self, sha: str) -> bytes:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(blobs.c.encoding, blobs.c.data).where(blobs.c.sha256 == sha)
            ).first()
        if row is None:
            raise EvidenceMissing(f"no evidence {sha} in the database")
        try:
            return decode(row.encoding, row.data)
        except (zlib.error, ValueError) as exc:
            raise EvidenceCorrupt(f"evidence {sha} cannot be decoded: {exc}") from None

    def _exists(self, sha: str) -> bool:
        with self.engine.connect() as conn:
            return bool(conn.execute(select(exists().where(blobs.c.sha256 == sha))).scalar())
