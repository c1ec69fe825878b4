"""The evidence table: one row per artifact, keyed by the sha256 of its bytes."""

from __future__ import annotations

from sqlalchemy import Column, LargeBinary
from sqlmodel import Field, SQLModel


class EvidenceBlob(SQLModel, table=True):
    """An artifact's bytes, compressed. ``last_put_at`` moves on every put, so
    an artifact a live attempt has just written is never collected, even when
    the same bytes were stored long ago."""

    __tablename__ = "evidence_blobs"

    sha256: str = Field(primary_key=True, max_length=64)
    #: Bytes kept (what ``sha256`` names), before compression.
    size: int
    #: Bytes offered; larger than ``size`` when the artifact was cut to the cap.
    original_size: int
    #: ``zlib`` or ``identity`` (stored as given: compression did not help).
    encoding: str
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    created_at: float
    last_put_at: float = Field(index=True)
