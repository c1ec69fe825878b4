"""A repository's checkout at a commit (plus a candidate patch), and the
preparation that reads its config and reproduction from it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from app.engine import RetryPolicy, Timeouts, activity_contract
from app.evidence import EvidenceRef
from app.repo_config import CheckoutConfig, Command, RepoConfig


class WorkspaceSpec(BaseModel):
    """Everything a workspace is rebuilt from; recorded in history."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``owner/name``: for credentials and logs.
    repo: str
    clone_url: str
    base_sha: str
    installation_id: int | None = None
    #: The candidate patch, applied (staged) on top of the base.
    patch: EvidenceRef | None = None
    #: History depth and tags (the repository's ``checkout:``); None: the commit alone.
    checkout: CheckoutConfig | None = None

    @model_serializer(mode="wrap")
    def _without_default_checkout(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Specs recorded before ``checkout`` existed must hash the same (replay).
        data = handler(self)
        if isinstance(data, dict) and data.get("checkout") is None:
            data.pop("checkout", None)
        return data


class PrepareInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workspace: WorkspaceSpec
    issue_body: str = ""
    #: Whether the issue's repro block may be used (its author has write access);
    #: when not, the repository's configured reproduction runs instead.
    issue_repro_allowed: bool = True


class PrepareResult(BaseModel):
    base_sha: str
    #: The repository's config (defaults when it has no file); None if invalid.
    config: RepoConfig | None
    #: Why the config is unusable, worded for the issue.
    config_error: str | None = None
    #: The reproduction commands: the issue's repro block, else the config's.
    reproduction: list[Command]
    reproduction_source: Literal["issue", "config"] | None
    reproduction_error: str | None = None
    #: The issue had a repro block that was not used (its author may not write).
    issue_repro_ignored: bool = False


prepare_workspace = activity_contract(
    "workspace.prepare",
    PrepareInput,
    PrepareResult,
    retry=RetryPolicy(initial_interval=2.0, max_interval=60.0, max_attempts=5),
    timeouts=Timeouts(start_to_close=20 * 60, heartbeat=60, schedule_to_close=60 * 60),
)
