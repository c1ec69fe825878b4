"""The inputs of the triage workflows (:mod:`app.workflows.triage`), which
handlers build from a delivery, and the signal that tells a run where its
repository moved."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.workflows.contracts import RunRequest

#: Sent to a repository's open runs on ``repository.renamed`` / ``transferred``.
REPOSITORY_MOVED = "repository_moved"


class LabelTriage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    request: RunRequest
    #: The operator's trigger label (``REPAIRBOT_TRIGGER_LABEL``): it counts
    #: when the repository's config cannot be read (the run then reports why).
    default_trigger: str


class CloseTriage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    request: RunRequest
    closer: str


class RepositoryMovedSignal(BaseModel):
    """The repository's name now (same id): later GitHub calls use it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    full_name: str
    clone_url: str
