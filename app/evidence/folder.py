"""Evidence in a local folder: an explicit option for one machine only
(``REPAIRBOT_EVIDENCE_STORE=folder``).

Workers on other machines cannot read this folder, so a run whose activities
move between machines fails with :class:`EvidenceMissing`; the database store
is the default for that reason. Artifacts live at ``root/ab/abcdef...``.
Writes go to a temporary file in the same directory and are renamed into
place, so a crash never leaves a half-written artifact under a real name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from app.evidence.base import DEFAULT_MAX_BYTES, EvidenceMissing, EvidenceStore, check_sha


class FolderEvidenceStore(EvidenceStore):
    """A directory of artifacts named by their sha256."""

    def __init__(self, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes=max_bytes)
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FolderEvidenceStore({str(self.root)!r})"

    def path(self, sha: str) -> Path:
        """Where the artifact ``sha`` lives (whether or not it exists yet)."""
        # Validating the name keeps a crafted "hash" from escaping the root.
        return self.root / check_sha(sha)[:2] / sha

    def _exists(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def _store(self, sha: str, data: bytes, *, original_size: int) -> None:
        target = self.path(sha)
        if not self._intact(target, sha):
            self._write(target, data)

    def _load(self, sha: str) -> bytes:
        try:
            return self.path(sha).read_bytes()
        except FileNotFoundError:
            raise EvidenceMissing(f"no evidence {sha} in {self.root}") from None

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
