"""What every evidence store promises: content addressing, a size cap, checked reads.

Artifacts are named by the sha256 of the bytes stored, and only their
:class:`EvidenceRef` (hash, size, kind, name) goes into execution history:
logs stay out of history. An artifact larger than the store's cap is cut to
its head and tail around a marker that says how much was left out and why;
the reference then names the bytes actually kept, so a read always verifies.
Reads re-hash the content: bytes that were altered are an error, never
evidence.
"""

from __future__ import annotations

import hashlib
import logging
import re

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("repairbot.evidence")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: Default cap on one artifact's stored size (REPAIRBOT_EVIDENCE_MAX_BYTES).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class EvidenceRef(BaseModel):
    """What history records about an artifact: enough to find and check it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    #: What the artifact is (``reproduction-log``, ``patch``, ``test-log``...).
    kind: str
    #: A human name for it (``reproduce-on-base.log``).
    name: str


class EvidenceError(Exception):
    """Base of the evidence store's errors."""


class EvidenceMissing(EvidenceError, LookupError):
    """No artifact with this hash is stored here."""


class EvidenceCorrupt(EvidenceError):
    """The stored bytes no longer hash to their name: they were altered."""


def check_sha(sha: str) -> str:
    """``sha`` if it is a lowercase sha256 hex digest (so it cannot name a path)."""
    if not _SHA256.match(sha):
        raise ValueError(f"not a sha256 hex digest: {sha!r}")
    return sha


def truncation_marker(original: int, omitted: int, cap: int) -> bytes:
    return (
        f"\n\n[repairbot: {omitted} bytes omitted here. The artifact was {original} bytes, "
        f"above the evidence cap of {cap} bytes (REPAIRBOT_EVIDENCE_MAX_BYTES); "
        "its start and end are kept.]\n\n"
    ).encode()


def cap(data: bytes, max_bytes: int) -> bytes:
    """``data`` if it fits in ``max_bytes``, else its head and tail around a marker.

    The result fits in ``max_bytes``, except under a cap smaller than the
    marker itself: the marker is never dropped, so a cut always shows.
    """
    if len(data) <= max_bytes:
        return data
    marker = truncation_marker(len(data), len(data), max_bytes)
    room = max(max_bytes - len(marker) - 16, 0)  # 16: the omitted count may shrink
    head, tail = room // 2, room - room // 2
    marker = truncation_marker(len(data), len(data) - head - tail, max_bytes)
    return data[:head] + marker + (data[len(data) - tail :] if tail else b"")


class EvidenceStore:
    """Content-addressed artifacts. Subclasses store bytes; this class names
    them, caps them and checks them.

    Safe for several processes at once: storing the same bytes twice is one
    artifact, and concurrent writers of it cannot clash.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("the evidence cap must be at least one byte")
        self.max_bytes = max_bytes

    def put(self, data: bytes, *, kind: str, name: str) -> EvidenceRef:
        """Store ``data`` (idempotent; capped) and return its reference."""
        kept = cap(data, self.max_bytes)
        if len(kept) != len(data):
            log.warning(
                "evidence %s (%s) is %d bytes, above the cap of %d: stored cut to %d bytes",
                name,
                kind,
                len(data),
                self.max_bytes,
                len(kept),
            )
        sha = hashlib.sha256(kept).hexdigest()
        self._store(sha, kept, original_size=len(data))
        return EvidenceRef(sha256=sha, size=len(kept), kind=kind, name=name)

    def get(self, sha: str) -> bytes:
        """The artifact's bytes, checked against its hash."""
        data = self._load(check_sha(sha))
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha:
            raise EvidenceCorrupt(f"evidence {sha} was altered (content hashes to {actual})")
        return data

    def get_ref(self, ref: EvidenceRef) -> bytes:
        return self.get(ref.sha256)

    def exists(self, sha: str) -> bool:
        return self._exists(check_sha(sha))

    def _store(self, sha: str, data: bytes, *, original_size: int) -> None:
        """Keep ``data`` under ``sha`` (its hash); a no-op if it is already intact."""
        raise NotImplementedError

    def _load(self, sha: str) -> bytes:
        """The stored bytes (unchecked); :class:`EvidenceMissing` if absent."""
        raise NotImplementedError

    def _exists(self, sha: str) -> bool:
        raise NotImplementedError
