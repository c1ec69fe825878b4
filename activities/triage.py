"""Activities that decide, before any run exists, whether an event asks for
one: the repository's trigger label, read through the contents API (no clone).

The file is the repository's: hostile. It is read at the default branch's
head, capped at the config parser's size limit, and only its trigger label
and bot allow-list are used here (the run itself reads the whole config from
its checkout, at the base commit it fixes).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from githubkit.exception import GitHubException
from pydantic import BaseModel, ConfigDict

from activities._support import parse_input
from activities.github import API, API_TIMEOUTS, GitHubAccess
from app.engine.activity_context import ActivityContext
from app.engine.registry import activity
from app.github.errors import classify, status_of
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


def _file_text(data: Any) -> str | None:
    """The file's text from a contents answer, None if the path is not a file."""
    if not isinstance(data, dict) or data.get("type") != "file":
        return None
    encoded = data.get("content")
    if not isinstance(encoded, str) or data.get("encoding") != "base64":
        raise RepoConfigError(f"{CONFIG_PATH} could not be read through the contents API")
    if len(encoded) > MAX_CONFIG_BYTES * 2:
        raise RepoConfigError(f"{CONFIG_PATH} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        return base64.b64decode(encoded, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise RepoConfigError(f"{CONFIG_PATH} is not UTF-8 text") from None


@activity("triage.trigger_config", retry=API, timeouts=API_TIMEOUTS)
async def trigger_config(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """The trigger label and bot allow-list of the repository's config at ``ref``."""
    request = parse_input(TriggerInput, raw)
    gh = actx.dep(GitHubAccess).factory.for_installation(
        request.installation_id, repository=request.repo
    )
    repo = RepoRef.parse(request.repo)
    try:
        response = await gh.arequest(
            "GET",
            f"/repos/{repo.owner}/{repo.name}/contents/{CONFIG_PATH}",
            params={"ref": request.ref},
        )
    except GitHubException as exc:
        if status_of(exc) == 404:  # no config: every default applies
            return TriggerConfig(trigger_label=parse_repo_config(None).trigger_label).model_dump()
        raise classify(exc, mutation=False) from exc
    try:
        config = parse_repo_config(_file_text(response.json()))
    except RepoConfigError as exc:
        return TriggerConfig(problem=str(exc)).model_dump()
    return TriggerConfig(
        trigger_label=config.trigger_label, allowed_bots=list(config.allowed_bots)
    ).model_dump()


ACTIVITIES = [trigger_config]
