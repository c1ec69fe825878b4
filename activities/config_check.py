"""Whether a pull request changes ``.github/repairbot.yml``, and its text at
the pull request's head: two contents reads, no clone (the check itself,
:func:`app.operations.config_check.check_config`, is pure and runs in the workflow)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from activities.github import API, API_TIMEOUTS, GitHubAccess, RepoInput
from app.engine import ActivityContext, ActivityDefn, typed_activity
from app.github.contents import file_at
from app.github.repos import RepoRef
from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES


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


@typed_activity("github.config_change", retry=API, timeouts=API_TIMEOUTS)
async def config_change(actx: ActivityContext, request: ConfigChangeInput) -> ConfigChange:
    gh = actx.dep(GitHubAccess).factory.for_installation(
        request.installation_id, repository=request.repo
    )
    repo = RepoRef.parse(request.repo)
    head = await file_at(gh, repo, CONFIG_PATH, request.head_sha, max_bytes=MAX_CONFIG_BYTES)
    base = await file_at(gh, repo, CONFIG_PATH, request.base_sha, max_bytes=MAX_CONFIG_BYTES)
    if (head.sha, head.problem) == (base.sha, base.problem):
        return ConfigChange(changed=False)
    return ConfigChange(changed=True, text=head.text, problem=head.problem, deleted=not head.exists)


ACTIVITIES: list[ActivityDefn] = [config_change]
