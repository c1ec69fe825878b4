"""Whether a pull request changes ``.github/repairbot.yml``, and its text at
the pull request's head (the config check workflow's one read)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS, RepoInput
from app.engine import activity_contract


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
