"""Issue comments (pull request conversation comments included)."""

from __future__ import annotations

from datetime import datetime

from emulator.render import issues as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.rest.issues import find_issue
from emulator.state import Comment, Issue, Repo, User


def _announce(
    ctx: Ctx, repo: Repo, comment: Comment, action: str, sender: User, **extra: object
) -> None:
    urls, store = ctx.emu.webhook_urls(), ctx.emu.store
    issue = repo.issues[comment.issue_number]
    body = {
        "action": action,
        "issue": render.issue(urls, store, repo, issue),
        "comment": render.comment(urls, store, repo, comment),
        **extra,
    }
    ctx.emu.events.for_repo(repo, "issue_comment", body, sender=sender)


def _find(repo: Repo, comment_id: int) -> Comment:
    comment = repo.comments.get(comment_id)
    if comment is None:
        raise not_found()
    return comment


def _body(ctx: Ctx) -> str:
    text = ctx.json().get("body")
    if not isinstance(text, str):
        raise validation(resource="IssueComment", code="missing_field", field="body")
    return text


def create_comment(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="read")
    issue: Issue = find_issue(repo, ctx.int_param("issue_number"))
    text, store, actor = _body(ctx), ctx.emu.store, ctx.actor()
    if issue.locked:
        raise ApiError(403, "Unable to create comment because issue is locked.")
    now = store.now()
    comment = Comment(
        id=store.next_id("comment"),
        issue_number=issue.number,
        user=actor,
        body=text,
        created_at=now,
        updated_at=now,
        performed_via_app=ctx.principal.app.id if ctx.principal.app else None,
    )
    repo.comments[comment.id] = comment
    issue.updated_at = now
    _announce(ctx, repo, comment, "created", actor)
    return Reply(201, render.comment(ctx.urls, store, repo, comment))


def list_comments(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    since_raw = ctx.query.get("since")
    since = datetime.fromisoformat(since_raw.replace("Z", "+00:00")) if since_raw else None
    found = [
        c
        for c in sorted(repo.comments.values(), key=lambda c: c.id)
        if c.issue_number == issue.number and (since is None or c.updated_at >= since)
    ]
    return paginate(ctx, [render.comment(ctx.urls, ctx.emu.store, repo, c) for c in found])


def get_comment(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    comment = _find(repo, ctx.int_param("comment_id"))
    return Reply(200, render.comment(ctx.urls, ctx.emu.store, repo, comment))


def _may_edit(ctx: Ctx, repo: Repo, comment: Comment) -> None:
    """Authors edit their own comments; others need write access (GitHub's rule)."""
    actor = ctx.actor()
    if actor.id == comment.user.id:
        return
    ctx.repo(permission="issues", level="write", role="write")


def update_comment(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="read")
    comment = _find(repo, ctx.int_param("comment_id"))
    _may_edit(ctx, repo, comment)
    text = _body(ctx)
    previous = comment.body
    comment.body, comment.updated_at = text, ctx.emu.store.now()
    if previous != text:
        _announce(ctx, repo, comment, "edited", ctx.actor(), changes={"body": {"from": previous}})
    return Reply(200, render.comment(ctx.urls, ctx.emu.store, repo, comment))


def delete_comment(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="read")
    comment = _find(repo, ctx.int_param("comment_id"))
    _may_edit(ctx, repo, comment)
    del repo.comments[comment.id]
    _announce_deleted(ctx, repo, comment)
    return Reply(204)


def _announce_deleted(ctx: Ctx, repo: Repo, comment: Comment) -> None:
    urls, store = ctx.emu.webhook_urls(), ctx.emu.store
    body = {
        "action": "deleted",
        "issue": render.issue(urls, store, repo, repo.issues[comment.issue_number]),
        "comment": render.comment(urls, store, repo, comment),
    }
    ctx.emu.events.for_repo(repo, "issue_comment", body, sender=ctx.actor())


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments", list_comments),
    Spec("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments", create_comment),
    Spec("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", get_comment),
    Spec("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}", update_comment),
    Spec("DELETE", "/repos/{owner}/{repo}/issues/comments/{comment_id}", delete_comment),
]
