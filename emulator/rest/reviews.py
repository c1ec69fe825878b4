"""Pull request reviews: submit (as a user or an app), list, get, dismiss."""

from __future__ import annotations

from emulator.gitview import open_git, pull_git
from emulator.render import pulls as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.rest.pulls import find_pull
from emulator.state import PullRequest, Repo, Review, User

EVENT_STATE = {
    "APPROVE": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "COMMENT": "COMMENTED",
}


def _announce(
    ctx: Ctx, repo: Repo, pr: PullRequest, review: Review, action: str, sender: User
) -> None:
    urls = ctx.emu.webhook_urls()
    shown = render.review(urls, repo, review)
    shown["state"] = review.state.lower()  # webhooks spell review states in lower case
    body = {
        "action": action,
        "review": shown,
        "pull_request": render.pull_simple(urls, repo, pr, pull_git(repo, pr, mergeable=False)),
    }
    ctx.emu.events.for_repo(repo, "pull_request_review", body, sender=sender)


def create_review(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests", level="write", role="read")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    body, actor, store = ctx.json(), ctx.actor(), ctx.emu.store
    event = body.get("event")
    if event is not None and event not in EVENT_STATE:
        raise validation(resource="PullRequestReview", code="invalid", field="event")
    if event in ("APPROVE", "REQUEST_CHANGES") and actor.id == pr.issue.user.id:
        verb = "approve" if event == "APPROVE" else "request changes on"
        raise ApiError(
            422, "Unprocessable Entity", errors=[f"Can not {verb} your own pull request"]
        )
    if event in ("REQUEST_CHANGES", "COMMENT") and not body.get("body"):
        raise ApiError(422, "Unprocessable Entity", errors=["Body is required for this event"])
    commit_id = body.get("commit_id") or pull_git(repo, pr, mergeable=False).head_sha
    if open_git(repo).resolve(str(commit_id)) != commit_id:
        raise validation(resource="PullRequestReview", code="invalid", field="commit_id")
    review = Review(
        id=store.next_id("review"),
        pull_number=pr.number,
        user=actor,
        body=str(body.get("body") or ""),
        state=EVENT_STATE[event] if event else "PENDING",
        commit_id=str(commit_id),
        submitted_at=store.now(),
    )
    repo.reviews[review.id] = review
    if event:
        _announce(ctx, repo, pr, review, "submitted", actor)
    return Reply(200, render.review(ctx.urls, repo, review))


def _visible(ctx: Ctx, review: Review) -> bool:
    """Pending reviews are private to their author."""
    return review.state != "PENDING" or (
        ctx.principal.user is not None and ctx.principal.user.id == review.user.id
    )


def list_reviews(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    found = [
        r for r in sorted(repo.reviews.values(), key=lambda r: r.id) if r.pull_number == pr.number
    ]
    return paginate(ctx, [render.review(ctx.urls, repo, r) for r in found if _visible(ctx, r)])


def _find(ctx: Ctx, repo: Repo, pr: PullRequest) -> Review:
    review = repo.reviews.get(ctx.int_param("review_id"))
    if review is None or review.pull_number != pr.number or not _visible(ctx, review):
        raise not_found()
    return review


def get_review(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    return Reply(200, render.review(ctx.urls, repo, _find(ctx, repo, pr)))


def dismiss_review(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests", level="write", role="write")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    review = _find(ctx, repo, pr)
    if review.state not in ("APPROVED", "CHANGES_REQUESTED"):
        raise ApiError(422, "Can not dismiss a " + review.state.lower() + " pull request review")
    review.state = "DISMISSED"
    _announce(ctx, repo, pr, review, "dismissed", ctx.actor())
    return Reply(200, render.review(ctx.urls, repo, review))


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", list_reviews),
    Spec("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", create_review),
    Spec("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}", get_review),
    Spec(
        "PUT",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/dismissals",
        dismiss_review,
    ),
]
