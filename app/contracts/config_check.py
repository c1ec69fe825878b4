"""The config check workflow (a check run on a pull request that changes
``.github/repairbot.yml``): its name, id, input and result, and its one read,
whether the pull request changes the file and its text at the head."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS, RepoInput
from app.engine import activity_contract
from app.github.checks import Conclusion

CONFIG_CHECK_WORKFLOW = "config-check"


def config_check_workflow_id(repository_id: int, head_sha: str) -> str:
    return f"config-check:{repository_id}:{head_sha}"


class ConfigCheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    installation_id: int
    repo: str
    head_sha: str
    base_sha: str


class ConfigCheckResult(BaseModel):
    #: ``unchanged``: the pull request leaves the file alone (no check run);
    #: else the conclusion of the check run written.
    outcome: Literal["unchanged"] | Conclusion


class ConfigChangeInput(RepoInput):
    head_sha: str
    base_sha: str


class ConfigChange(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    changed: bool
    #: The file at the head (``None``: absent, or unusable: see ``problem``).
    text: str | None = None
    problem: str | None = None
    deleted: bool = False


config_change = activity_contract(
    "github.config_change", ConfigChangeInput, ConfigChange, retry=API, timeouts=API_TIMEOUTS
)
