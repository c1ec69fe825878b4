"""Activities that decide, before any run exists, whether an event asks for
one: the repository's trigger label, read through the contents API (no clone).

The file is the repository's: hostile. It is read at the default branch's
head, capped at the config parser's size limit, and only its trigger label
and bot allow-list are used here (the run itself reads the whole config from
its checkout, at the base commit it fixes).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from activities.github import API, API_TIMEOUTS, GitHubAccess
from app.engine import ActivityContext, ActivityDefn, typed_activity
from app.github.contents import file_at
from app.github.repos import RepoRef
from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES, RepoConfigError, parse_repo_config


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


@typed_activity("triage.trigger_config", retry=API, timeouts=API_TIMEOUTS)
async def trigger_config(actx: ActivityContext, request: TriggerInput) -> TriggerConfig:
    """The trigger label and bot allow-list of the repository's config at ``ref``."""
    gh = actx.dep(GitHubAccess).factory.for_installation(
        request.installation_id, repository=request.repo
    )
    found = await file_at(
        gh, RepoRef.parse(request.repo), CONFIG_PATH, request.ref, max_bytes=MAX_CONFIG_BYTES
    )
    if found.problem is not None:
        return TriggerConfig(problem=found.problem)
    try:
        config = parse_repo_config(found.text)  # None (no file): every default applies
    except RepoConfigError as exc:
        return TriggerConfig(problem=str(exc))
    return TriggerConfig(trigger_label=config.trigger_label, allowed_bots=list(config.allowed_bots))


ACTIVITIES: list[ActivityDefn] = [trigger_config]
