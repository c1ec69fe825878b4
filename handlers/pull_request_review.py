"""``pull_request_review``: reviews of repairbot's pull requests become signals,
deduplicated by review id, carrying who reviewed which commit and how."""

from __future__ import annotations

from app.webhooks.events import PullRequestReviewEvent
from app.workflows.ids import issue_of_branch, repair_workflow_id
from handlers.router import HandlerContext, Router

router = Router()


@router.on("pull_request_review", "submitted")
@router.on("pull_request_review", "dismissed")
def review(event: PullRequestReviewEvent, ctx: HandlerContext) -> None:
    issue = issue_of_branch(event.pull_request.head.ref)
    if issue is None:
        return
    review = event.review
    ctx.signal(
        repair_workflow_id(event.repository.full_name, issue),
        "review",
        {
            "action": event.action,
            "review_id": review.id,
            "state": review.state,
            "commit_id": review.commit_id,
            "reviewer": review.user.login,
            "body": review.body,
            "pull_number": event.pull_request.number,
        },
        dedupe_key=f"review:{review.id}:{event.action}",
    )
