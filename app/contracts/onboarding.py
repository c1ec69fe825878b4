"""Onboarding a newly installed repository: look at it, and make sure its
trigger label exists (the proposal goes through the GitHub activities)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS, GIT_TIMEOUTS, RepoInput
from app.engine import activity_contract


class InspectInput(RepoInput):
    repository_id: int
    trigger_label: str = "repairbot"


class InspectResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    #: ``configured`` (the file exists), ``proposed`` (an onboarding PR exists,
    #: open or closed: the maintainer's choice stands), ``empty`` (no commit to
    #: build on) or ``needs-config``.
    state: str
    default_branch: str = ""
    base_sha: str = ""
    #: The proposed ``.github/repairbot.yml`` as a patch in the evidence store.
    patch_sha: str = ""
    config_text: str = ""
    reasons: list[str] = []
    pull_number: int | None = None


class LabelInput(RepoInput):
    name: str
    color: str = "0e8a16"
    description: str = "Ask repairbot to reproduce and fix this issue"


class LabelResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    created: bool


inspect_repository = activity_contract(
    "onboarding.inspect",
    InspectInput,
    InspectResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
ensure_label = activity_contract(
    "github.ensure_label",
    LabelInput,
    LabelResult,
    retry=API,
    timeouts=API_TIMEOUTS,
    reconciled=True,
)
