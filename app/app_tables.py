"""The application's own tables, all in this one module (the engine's are in
app/engine/_tables.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Column, LargeBinary, MetaData
from sqlmodel import Field, SQLModel

# The engine's tables live on the same SQLModel.metadata; importing them here
# means whoever asks for the whole schema (below) gets every table.
from app.engine import schema  # noqa: F401


def _github_id() -> Column[int]:
    # GitHub ids outgrow 32 bits; store them as 64-bit integers.
    return Column(BigInteger, primary_key=True, autoincrement=False)


class WebhookDelivery(SQLModel, table=True):
    """Every delivery that passed the signature check, with how it was handled.

    Recorded in the same transaction as the state changes its handler made, so a
    redelivery (same ``X-GitHub-Delivery``) finds it and changes nothing. A
    delivery whose handler failed stays here as ``failed`` and can be retried
    from the CLI (``repairbot deliveries retry <id>``).
    """

    __tablename__ = "webhook_deliveries"

    delivery_id: str = Field(primary_key=True)
    event: str = Field(index=True)
    action: str | None = None
    status: str = Field(index=True)  # handled | ignored | failed | malformed
    detail: str | None = None
    body: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    received_at: float
    handled_at: float | None = None
    attempts: int = 1


class Installation(SQLModel, table=True):
    __tablename__ = "installations"

    id: int = Field(sa_column=_github_id())
    account_login: str
    account_type: str
    status: str  # active | suspended | deleted
    updated_at: float


class InstallationRepository(SQLModel, table=True):
    __tablename__ = "installation_repositories"

    installation_id: int = Field(
        sa_column=Column(BigInteger, primary_key=True, autoincrement=False)
    )
    repository_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    full_name: str = Field(index=True)
    active: bool = True
    updated_at: float
    details: Any = Field(default=None, sa_column=Column(JSON, nullable=True))


class ApiToken(SQLModel, table=True):
    """An operator's API token (``repairbot tokens create``). Only the sha256 of
    the token is kept: a database leak does not hand out working tokens."""

    __tablename__ = "api_tokens"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    token_sha256: str = Field(unique=True)
    #: Space-separated: ``read`` (runs, deliveries), ``act`` (run actions,
    #: delivery re-runs), ``metrics`` (``/metrics``).
    scopes: str
    created_at: float
    last_used_at: float | None = None
    revoked_at: float | None = None


class SignedOutSession(SQLModel, table=True):
    """A dashboard sign-in that was signed out: its cookie is refused from then
    on, by every web process. Kept until the cookie would have expired anyway."""

    __tablename__ = "signed_out_sessions"

    #: sha256 of the session's id (the cookie holds the id, encrypted).
    sid_sha256: str = Field(primary_key=True)
    expires_at: float = Field(index=True)


class InstallationRunSlot(SQLModel, table=True):
    """One of an installation's slots for runs doing costly work. The primary
    key (installation, slot number) is what makes the cap race-free: two
    workers cannot both take the last slot, one insert fails."""

    __tablename__ = "installation_run_slots"

    installation_id: int = Field(primary_key=True)
    slot: int = Field(primary_key=True)
    run_id: str = Field(unique=True)
    taken_at: float


class DeliveryScan(SQLModel, table=True):
    """The delivery reconciler's place in GitHub's list of the App's deliveries.

    One row per App. ``high_water`` is the newest ``delivered_at`` a completed
    scan saw; an unfinished scan keeps GitHub's cursor to resume from. The
    lease lets one worker scan at a time; ``not_before`` holds every worker
    back while GitHub asks us to wait (rate limit).
    """

    __tablename__ = "delivery_scans"

    name: str = Field(primary_key=True)
    high_water: float | None = None
    resume_cursor: str | None = None
    scan_newest: float | None = None
    lease_holder: str | None = None
    lease_until: float = 0.0
    not_before: float = 0.0
    updated_at: float


class Redelivery(SQLModel, table=True):
    """A delivery GitHub attempted that the intake never recorded (or recorded
    as failed): asked again until the intake has it, within a bounded number
    of requests, at most one per interval."""

    __tablename__ = "webhook_redeliveries"

    guid: str = Field(primary_key=True)
    #: GitHub's id of the newest attempt seen (what ``POST .../attempts`` takes).
    github_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    event: str
    action: str | None = None
    delivered_at: float
    state: str = Field(index=True)  # pending | recorded | gave-up
    requests: int = 0
    requested_at: float | None = None
    detail: str | None = None
    first_seen_at: float


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


class GitHubConditional(SQLModel, table=True):
    """The last answer GitHub gave to a GET, kept for conditional requests.

    Shared by every worker (not one worker's disk): a re-read sends the stored
    ``etag`` as ``If-None-Match``, and GitHub answers ``304 Not Modified``
    (not counted against the rate limit) while nothing changed.
    """

    __tablename__ = "github_conditional"

    installation_id: int = Field(
        sa_column=Column(BigInteger, primary_key=True, autoincrement=False)
    )
    #: sha256 of the request (URL with its query, Accept and API version headers).
    request_key: str = Field(primary_key=True, max_length=64)
    etag: str
    content_type: str
    body: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    stored_at: float = Field(index=True)


class GitHubRateBudget(SQLModel, table=True):
    """What GitHub last said about one installation's rate limit, shared by
    every worker process: reads wait while little is left, mutations keep the
    reserve; a secondary limit pauses every worker's calls until it passes."""

    __tablename__ = "github_rate_budget"

    installation_id: int = Field(
        sa_column=Column(BigInteger, primary_key=True, autoincrement=False)
    )
    limit: int
    remaining: int
    #: Epoch seconds when the primary window resets.
    reset_at: float
    #: Epoch seconds until which GitHub asked everyone to wait (secondary limit).
    blocked_until: float = 0.0
    updated_at: float


def whole_schema() -> MetaData:
    """Every table, the app's and the engine's: what migrations compare against
    and tests build."""
    return SQLModel.metadata
