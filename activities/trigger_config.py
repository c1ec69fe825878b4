"""Who may trigger a run, read before anything is cloned: the repository's
trigger label and bot allow-list, from ``.github/repairbot.yml`` on the
default branch through the contents API (one small read, no checkout).

A label added by a bot starts a run like any label (handlers cannot read the
repository); this answer lets the run end quietly before it builds a
workspace for a bot the repository never allowed. The run reads the config
again from its pinned base commit during preparation, so a change between
the two reads cannot widen who may trigger it.
"""

from __future__ import annotations

from activities.github import GitHubAccess
from app.contracts import trigger_config
from app.contracts.trigger_config import TriggerConfig, TriggerConfigInput
from app.engine import ActivityContext, implements
from app.github.contents import file_at
from app.github.repos import RepoRef
from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES, RepoConfigError, parse_repo_config


class TriggerConfigActivities:
    def __init__(self, access: GitHubAccess) -> None:
        self.access = access

    @implements(trigger_config.read_trigger_config)
    async def read_trigger_config(
        self, actx: ActivityContext, request: TriggerConfigInput
    ) -> TriggerConfig:
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        found = await file_at(
            gh, RepoRef.parse(request.repo), CONFIG_PATH, request.ref, max_bytes=MAX_CONFIG_BYTES
        )
        if found.problem is not None:
            return TriggerConfig(valid=False)
        return _answer(found.text)  # None (no file): the defaults


def _answer(text: str | None) -> TriggerConfig:
    try:
        config = parse_repo_config(text)
    except RepoConfigError:
        return TriggerConfig(valid=False)
    return TriggerConfig(
        valid=True, trigger_label=config.trigger_label, allowed_bots=list(config.allowed_bots)
    )
