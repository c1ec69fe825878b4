"""Who may trigger a run, read before anything is cloned: the repository's
trigger label and bot allow-list on its default branch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS, RepoInput
from app.engine import activity_contract


class TriggerConfigInput(RepoInput):
    #: Branch (or commit) to read the config from.
    ref: str


class TriggerConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    #: False: the file is unusable (invalid, too large, not a file); nobody but
    #: people with write access counts until it is fixed.
    valid: bool
    trigger_label: str = ""
    allowed_bots: list[str] = []


read_trigger_config = activity_contract(
    "github.trigger_config", TriggerConfigInput, TriggerConfig, retry=API, timeouts=API_TIMEOUTS
)
