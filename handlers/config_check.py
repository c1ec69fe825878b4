"""``pull_request`` opened, reopened or pushed to: check the repository's
``.github/repairbot.yml`` as that pull request would leave it (a check run on
its head commit, only when it changes the file; see
:mod:`app.workflows.config_check`). Any pull request counts, forks included:
the check reads the file, never runs it."""

from __future__ import annotations

from app.webhooks.events import PullRequestEvent
from app.webhooks.routing import HandlerContext, Router
from app.workflows.config_check import (
    ConfigCheckRequest,
    config_check_run,
    config_check_workflow_id,
)

router = Router()


@router.on("pull_request", "opened")
@router.on("pull_request", "reopened")
@router.on("pull_request", "synchronize")
def check_config_change(event: PullRequestEvent, ctx: HandlerContext) -> None:
    if event.installation is None:
        return
    pr = event.pull_request
    request = ConfigCheckRequest(
        installation_id=event.installation.id,
        repo=event.repository.full_name,
        head_sha=pr.head.sha,
        base_sha=pr.base.sha,
    )
    ctx.start_typed(
        config_check_run, request, id=config_check_workflow_id(event.repository.id, pr.head.sha)
    )
