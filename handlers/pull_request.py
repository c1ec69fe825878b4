"""``pull_request``: what humans do to repairbot's pull requests reaches the run
as signals, so it learns that its branch or its approval no longer holds."""

from __future__ import annotations

from app.webhooks.events import PullRequestEvent
from app.workflows.ids import issue_of_branch, repair_workflow_id
from handlers.router import HandlerContext, Router

router = Router()


def _run_of(event: PullRequestEvent) -> str | None:
    issue = issue_of_branch(event.pull_request.head.ref)
    if issue is None:
        return None
    return repair_workflow_id(event.repository.full_name, issue)


@router.on("pull_request", "closed")
def closed(event: PullRequestEvent, ctx: HandlerContext) -> None:
    workflow_id = _run_of(event)
    if workflow_id is None:
        return
    pr = event.pull_request
    ctx.signal(
        workflow_id,
        "pr_closed",
        {
            "number": pr.number,
            "merged": bool(pr.merged),
            "merge_commit_sha": pr.merge_commit_sha,
            "by": event.sender.login,
        },
        dedupe_key=f"pr-closed:{pr.number}:{ctx.delivery_id}",
    )


@router.on("pull_request", "synchronize")
def synchronize(event: PullRequestEvent, ctx: HandlerContext) -> None:
    workflow_id = _run_of(event)
    if workflow_id is None or event.sender.login == ctx.bot_login:
        return  # our own pushes are already known to the run
    pr = event.pull_request
    ctx.signal(
        workflow_id,
        "pr_synchronized",
        {"number": pr.number, "head_sha": pr.head.sha, "by": event.sender.login},
        dedupe_key=f"pr-sync:{pr.number}:{pr.head.sha}",
    )
