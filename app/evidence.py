"""Content-addressed evidence: reproduction logs, patches, test output.

Artifacts are stored once by the sha256 of their bytes, at ``root/ab/abcdef...``,
and only their :class:`EvidenceRef` (hash, size, kind, name) goes into
execution history: logs stay out of history. Writes go to a temporary file
in the same directory and are renamed into place, so a crash never leaves a
half-written artifact under a real name, and storing the same bytes twice is
one file. Reads re-hash the content: a file that was altered on disk is an
error, never evidence.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
    """The stored bytes no longer hash to their name: the file was altered."""


class EvidenceStore:
    """A directory of artifacts named by their sha256.

    Safe for several processes at once: every write is a whole-file rename of
    identical content, so concurrent writers of the same artifact cannot clash.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"EvidenceStore({str(self.root)!r})"

    def path(self, sha: str) -> Path:
        """Where the artifact ``sha`` lives (whether or not it exists yet)."""
        # Validating the name keeps a crafted "hash" from escaping the root.
        if not _SHA256.match(sha):
            raise ValueError(f"not a sha256 hex digest: {sha!r}")
        return self.root / sha[:2] / sha

    def exists(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def put(self, data: bytes, *, kind: str, name: str) -> EvidenceRef:
        """Store ``data`` (idempotent) and return its reference."""
        sha = hashlib.sha256(data).hexdigest()
        target = self.path(sha)
        if not self._intact(target, sha):
            self._write(target, data)
        return EvidenceRef(sha256=sha, size=len(data), kind=kind, name=name)

    def put_text(self, text: str, *, kind: str, name: str) -> EvidenceRef:
        return self.put(text.encode(), kind=kind, name=name)

    def get(self, sha: str) -> bytes:
        """The artifact's bytes, checked against its hash."""
        try:
            data = self.path(sha).read_bytes()
        except FileNotFoundError:
            raise EvidenceMissing(f"no evidence {sha} in {self.root}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha:
            raise EvidenceCorrupt(
                f"evidence {sha} was altered on disk (content hashes to {actual})"
            )
        return data

    def get_ref(self, ref: EvidenceRef) -> bytes:
        return self.get(ref.sha256)

    @staticmethod
    def _intact(target: Path, sha: str) -> bool:
        # Re-hash rather than trust the name: a put over an altered file repairs it.
        try:
            return hashlib.sha256(target.read_bytes()).hexdigest() == sha
        except FileNotFoundError:
            return False

    @staticmethod
    def _write(target: Path, data: bytes) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)  # artifacts are immutable; make that visible
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
