"""``pull_request_review``: reviews of repairbot's pull requests become signals,
deduplicated by review id, carrying who reviewed which commit, how and when."""

from __future__ import annotations

from app.contracts.ids import issue_of_branch
from app.contracts.requests import REVIEW, ReviewSignal
from app.webhooks.events import PullRequestReviewEvent
from app.webhooks.routing import HandlerContext, Router
from handlers.inputs import issue_run

router = Router()


@router.on("pull_request_review", "submitted")
@router.on("pull_request_review", "dismissed")
def review(event: PullRequestReviewEvent, ctx: HandlerContext) -> None:
    if not event.pull_request.from_run_branch_home(ctx.settings.proposal_owner):
        ctx.notes.append("review of a pull request from another repository: ignored")
        return
    issue = issue_of_branch(event.pull_request.head.ref)
    if issue is None:
        return
    review = event.review
    ctx.signal(
        issue_run(ctx, event.repository, issue),
        REVIEW,
        ReviewSignal(
            action=event.action,
            review_id=review.id,
            state=review.state,
            commit_id=review.commit_id,
            reviewer=review.user.login,
            body=review.body,
            pull_number=event.pull_request.number,
            submitted_at=review.submitted_at.isoformat() if review.submitted_at else None,
        ).model_dump(mode="json"),
        dedupe_key=f"review:{review.id}:{event.action}",
    )
