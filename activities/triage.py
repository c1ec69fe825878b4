"""Activities that decide, before any run exists, whether an event asks for
one: the repository's trigger label, read through the contents API (no clone).

The file is the repository's: hostile. It is read at the default branch's
head, capped at the config parser's size limit, and only its trigger label
and bot allow-list are used here (the run itself reads the whole config from
its checkout, at the base commit it fixes).
"""

from __future__ import annotations

from activities.github import GitHubAccess
from app.contracts import triage
from app.contracts.triage import TriggerConfig, TriggerInput
from app.engine import ActivityContext, implements
from app.github.contents import file_at
from app.github.repos import RepoRef
from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES, RepoConfigError, parse_repo_config


class TriageActivities:
    def __init__(self, access: GitHubAccess) -> None:
        self.access = access

    @implements(triage.trigger_config)
    async def trigger_config(self, actx: ActivityContext, request: TriggerInput) -> TriggerConfig:
        """The trigger label and bot allow-list of the repository's config at ``ref``."""
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        found = await file_at(
            gh, RepoRef.parse(request.repo), CONFIG_PATH, request.ref, max_bytes=MAX_CONFIG_BYTES
        )
        if found.problem is not None:
            return TriggerConfig(problem=found.problem)
        try:
            config = parse_repo_config(found.text)  # None (no file): every default applies
        except RepoConfigError as exc:
            return TriggerConfig(problem=str(exc))
        return TriggerConfig(
            trigger_label=config.trigger_label, allowed_bots=list(config.allowed_bots)
        )
