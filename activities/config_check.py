"""Whether a pull request changes ``.github/repairbot.yml``, and its text at
the pull request's head: two contents reads, no clone (the check itself,
:func:`app.operations.config_check.check_config`, is pure and runs in the workflow)."""

from __future__ import annotations

from activities.github import GitHubAccess
from app.contracts import config_check
from app.contracts.config_check import ConfigChange, ConfigChangeInput
from app.engine import ActivityContext, implements
from app.github.contents import file_at
from app.github.repos import RepoRef
from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES


class ConfigCheckActivities:
    def __init__(self, access: GitHubAccess) -> None:
        self.access = access

    @implements(config_check.config_change)
    async def config_change(
        self, actx: ActivityContext, request: ConfigChangeInput
    ) -> ConfigChange:
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        repo = RepoRef.parse(request.repo)
        head = await file_at(gh, repo, CONFIG_PATH, request.head_sha, max_bytes=MAX_CONFIG_BYTES)
        base = await file_at(gh, repo, CONFIG_PATH, request.base_sha, max_bytes=MAX_CONFIG_BYTES)
        if (head.sha, head.problem) == (base.sha, base.problem):
            return ConfigChange(changed=False)
        return ConfigChange(
            changed=True, text=head.text, problem=head.problem, deleted=not head.exists
        )
