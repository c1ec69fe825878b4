"""``pull_request``: what humans do to repairbot's pull requests reaches the run
as signals, so it learns that its branch or its approval no longer holds.

Only pull requests whose head branch is one of repairbot's *in the base
repository or the proposal account's fork* reach a run: anyone's fork can name
its branch ``repairbot/issue-1`` too. The run checks the pull request's number
again (it knows its own).
"""

from __future__ import annotations

from app.contracts.ids import issue_of_branch
from app.contracts.requests import (
    PR_CLOSED,
    PR_SYNCHRONIZED,
    PullClosedSignal,
    PullSynchronizedSignal,
)
from app.webhooks.events import PullRequestEvent
from app.webhooks.routing import HandlerContext, Router
from handlers.inputs import issue_run

router = Router()


def run_of(event: PullRequestEvent, ctx: HandlerContext) -> str | None:
    """The repair run this pull request may belong to, or None (not ours, or a
    stranger's fork's)."""
    if not event.pull_request.from_run_branch_home(ctx.settings.proposal_owner):
        ctx.notes.append("pull request from another repository: ignored")
        return None
    issue = issue_of_branch(event.pull_request.head.ref)
    if issue is None:
        return None
    return issue_run(ctx, event.repository, issue)


@router.on("pull_request", "closed")
def closed(event: PullRequestEvent, ctx: HandlerContext) -> None:
    workflow_id = run_of(event, ctx)
    if workflow_id is None:
        return
    pr = event.pull_request
    ctx.signal(
        workflow_id,
        PR_CLOSED,
        PullClosedSignal(
            number=pr.number,
            merged=bool(pr.merged),
            merge_commit_sha=pr.merge_commit_sha,
            by=event.sender.login,
        ).model_dump(mode="json"),
        dedupe_key=f"pr-closed:{pr.number}",
    )


@router.on("pull_request", "synchronize")
def synchronize(event: PullRequestEvent, ctx: HandlerContext) -> None:
    workflow_id = run_of(event, ctx)
    if workflow_id is None or event.sender.login == ctx.bot_login:
        return  # our own pushes are already known to the run
    pr = event.pull_request
    ctx.signal(
        workflow_id,
        PR_SYNCHRONIZED,
        PullSynchronizedSignal(
            number=pr.number, head_sha=pr.head.sha, by=event.sender.login
        ).model_dump(mode="json"),
        dedupe_key=f"pr-sync:{pr.number}:{pr.head.sha}",
    )
