"""Content-addressed evidence: reproduction logs, patches, test output.

In the database by default (:class:`DatabaseEvidenceStore`), so any worker
machine and the web process read what any worker wrote; a local folder
(:class:`FolderEvidenceStore`) only when asked for, on one machine. History
holds only :class:`EvidenceRef` values; the worker gives the store to the
activity objects that need it (app/main/worker_process.py), whichever kind it
is.
"""

from __future__ import annotations

from sqlalchemy import Engine

from app.config import Settings
from app.evidence.base import (
    DEFAULT_MAX_BYTES,
    EvidenceCorrupt,
    EvidenceError,
    EvidenceMissing,
    EvidenceRef,
    EvidenceStore,
)
from app.evidence.database import DatabaseEvidenceStore
from app.evidence.folder import FolderEvidenceStore

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DatabaseEvidenceStore",
    "EvidenceCorrupt",
    "EvidenceError",
    "EvidenceMissing",
    "EvidenceRef",
    "EvidenceStore",
    "FolderEvidenceStore",
    "open_evidence_store",
]


def open_evidence_store(settings: Settings, engine: Engine) -> EvidenceStore:
    """The store ``settings`` ask for, sharing ``engine`` (and its pool)."""
    if settings.evidence_store == "folder":
        return FolderEvidenceStore(settings.evidence_dir, max_bytes=settings.evidence_max_bytes)
    return DatabaseEvidenceStore(engine, max_bytes=settings.evidence_max_bytes)
