"""The inputs of the triage workflows (:mod:`app.workflows.triage`), which
handlers build from a delivery, and the signals that tell a run what GitHub
did around it: its repository moved, its issue was deleted, its installation
was unsuspended."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.requests import RunRequest

#: Sent to a repository's open runs on ``repository.renamed`` / ``transferred``.
REPOSITORY_MOVED = "repository_moved"
#: Sent to the issue's run on ``issues.deleted``, just before its cancel: the
#: run's cleanup then writes no comment on an issue that is gone.
ISSUE_DELETED = "issue_deleted"
#: Sent to an installation's open runs on ``installation.unsuspend``: a run
#: waiting out the suspension (:func:`app.workflows.calls.call`) goes on.
INSTALLATION_RESUMED = "installation_resumed"


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
