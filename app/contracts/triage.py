"""What the triage workflows ask before any run exists: the repository's
trigger label and bot allow-list, read through the contents API (no clone)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts.github import API, API_TIMEOUTS
from app.engine import activity_contract


class TriggerInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str
    installation_id: int
    ref: str


class TriggerConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    #: The repository's trigger label; None when its config cannot be read.
    trigger_label: str | None = None
    allowed_bots: list[str] = []
    #: Why the config could not be used (the run reports it as invalid-config).
    problem: str | None = None


trigger_config = activity_contract(
    "triage.trigger_config", TriggerInput, TriggerConfig, retry=API, timeouts=API_TIMEOUTS
)
