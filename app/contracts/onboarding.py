"""Onboarding a newly installed repository: the workflow's name, id, input
and result; its activities look at the repository and make sure its trigger
label exists (the proposal goes through the GitHub activities)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS, GIT_TIMEOUTS, RepoInput
from app.engine import activity_contract

ONBOARDING_WORKFLOW = "onboard"


def onboarding_workflow_id(repository_id: int) -> str:
    return f"onboard:{repository_id}"


class OnboardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    installation_id: int
    repository_id: int
    repo: str
    trigger_label: str = "repairbot"


class OnboardResult(BaseModel):
    #: ``proposed`` (by this run or one before it), or what the inspection
    #: found instead: ``configured`` or ``empty`` (see ``InspectResult.state``).
    outcome: str
    #: The onboarding pull request, when there is one.
    pull_number: int | None


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
