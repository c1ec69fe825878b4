"""``pull_request`` opened, reopened or pushed to: check the repository's
``.github/repairbot.yml`` as that pull request would leave it (a check run on
its head commit, only when it changes the file; see
app/workflows/config_check.py). Any pull request counts, forks included:
the check reads the file, never runs it."""

from __future__ import annotations

from app.contracts.config_check import (
    CONFIG_CHECK_WORKFLOW,
    ConfigCheckRequest,
    config_check_workflow_id,
)
from app.webhooks.events import PullRequestEvent
from app.webhooks.routing import HandlerContext, Router

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
    workflow_id = config_check_workflow_id(event.repository.id, pr.head.sha)
    ctx.start(CONFIG_CHECK_WORKFLOW, workflow_id, request)
