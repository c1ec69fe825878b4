"""One comment per operation, found by its marker, created once and updated in place.

GitHub has no conditional create for comments, so two workers racing on the
same operation can each create one. After creating, we list again and keep
the oldest marked comment (lowest id), deleting any younger copies; both
racers make the same choice, so they converge on exactly one comment.

Once a caller knows the comment's id (an earlier call returned it), the next
edit goes straight to it (:func:`rewrite_comment`): one request instead of a
listing of every comment on the issue and an edit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from githubkit.exception import GitHubException
from githubkit.rest.paginator import Paginator
from githubkit_schemas.v2026_03_10.models import IssueComment

from app.github.client import InstallationGitHub
from app.github.errors import classified, classify, no_answer, status_of
from app.github.markers import Marker, OpId, find_marked, with_marker
from app.github.repos import RepoRef


@dataclass(frozen=True)
class CommentResult:
    id: int
    html_url: str
    #: This call created the comment (False: it existed, perhaps updated).
    created: bool
    #: This call changed the comment's body.
    updated: bool


def _body_of(comment: IssueComment) -> str | None:
    return comment.body if isinstance(comment.body, str) else None


def _ours(comment: IssueComment, bot_login: str | None) -> bool:
    return bot_login is None or (comment.user is not None and comment.user.login == bot_login)


async def find_comments(
    gh: InstallationGitHub,
    repo: RepoRef,
    issue_number: int,
    op: OpId,
    *,
    bot_login: str | None = None,
) -> list[IssueComment]:
    """Comments on the issue marked for ``op``, oldest first.

    ``bot_login`` (``<app-slug>[bot]``) restricts the search to comments the App
    wrote: anyone can paste a marker into a comment of their own.
    """
    pages: Paginator[IssueComment] = gh.rest.paginate(
        gh.rest.issues.async_list_comments,
        owner=repo.owner,
        repo=repo.name,
        issue_number=issue_number,
        per_page=100,
    )
    with classified(mutation=False):
        comments = [comment async for comment in pages if _ours(comment, bot_login)]
    marked = find_marked(comments, op, body=_body_of)
    return sorted(marked, key=lambda comment: comment.id)


async def _delete_quietly(gh: InstallationGitHub, repo: RepoRef, comment_id: int) -> None:
    try:
        await gh.rest.issues.async_delete_comment(repo.owner, repo.name, comment_id)
    except GitHubException as exc:
        if status_of(exc) == 404:
            return  # already gone: the racing twin deleted the same duplicate
        raise classify(exc, mutation=True) from exc


async def _converge(
    gh: InstallationGitHub, repo: RepoRef, found: list[IssueComment], body: str, *, created: bool
) -> CommentResult:
    keep, *extra = found
    for duplicate in extra:
        await _delete_quietly(gh, repo, duplicate.id)
    if _body_of(keep) == body:
        return CommentResult(keep.id, keep.html_url, created=created, updated=False)
    with classified(mutation=True):
        response = await gh.rest.issues.async_update_comment(
            repo.owner, repo.name, keep.id, body=body
        )
    updated = response.parsed_data
    return CommentResult(updated.id, updated.html_url, created=created, updated=True)


async def ensure_comment(
    gh: InstallationGitHub,
    repo: RepoRef,
    issue_number: int,
    op: OpId,
    body: str,
    *,
    fields: Mapping[str, str] | None = None,
    bot_login: str | None,
    unwritten: bool = False,
) -> CommentResult:
    """Make the issue carry exactly one comment for ``op`` with ``body`` (plus marker).

    ``bot_login`` is the App's account (``GitHubClientFactory.bot_login()``):
    only its comments can be ours. ``None`` trusts any author, for tests and
    tools that know the issue holds no forged markers.

    ``unwritten``: the caller knows nothing has written ``op``'s marker yet
    (the operation's first write, on the first attempt of its task: an
    earlier attempt, whose create may have landed, makes the next one a
    second), so the comment is created without listing the issue's comments
    first. The listing after the create still finds a racing twin's.
    """
    text = with_marker(body, Marker(op, dict(fields or {})))
    if not unwritten:
        found = await find_comments(gh, repo, issue_number, op, bot_login=bot_login)
        if found:
            return await _converge(gh, repo, found, text, created=False)
    try:
        response = await gh.rest.issues.async_create_comment(
            repo.owner, repo.name, issue_number, body=text
        )
    except GitHubException as exc:
        if not no_answer(exc):
            raise classify(exc, mutation=True) from exc
        # The answer was lost; the comment may exist. Read back before anything else.
        found = await find_comments(gh, repo, issue_number, op, bot_login=bot_login)
        if not found:
            raise classify(exc, mutation=True) from exc
        return await _converge(gh, repo, found, text, created=True)
    mine = response.parsed_data
    found = await find_comments(gh, repo, issue_number, op, bot_login=bot_login)
    if not found:  # a list that lags behind the create: ours is the only one we know of
        return CommentResult(mine.id, mine.html_url, created=True, updated=False)
    return await _converge(gh, repo, found, text, created=found[0].id == mine.id)


async def rewrite_comment(
    gh: InstallationGitHub,
    repo: RepoRef,
    comment_id: int,
    issue_number: int,
    op: OpId,
    body: str,
    *,
    bot_login: str | None,
) -> CommentResult:
    """Give the comment ``comment_id``, which an earlier call for ``op``
    returned, ``body`` (plus marker) in one request. A comment deleted since
    (404) is made again as :func:`ensure_comment` makes it."""
    text = with_marker(body, Marker(op, {}))
    try:
        response = await gh.rest.issues.async_update_comment(
            repo.owner, repo.name, comment_id, body=text
        )
    except GitHubException as exc:
        if status_of(exc) != 404:
            raise classify(exc, mutation=True) from exc
        return await ensure_comment(gh, repo, issue_number, op, body, bot_login=bot_login)
    updated = response.parsed_data
    return CommentResult(updated.id, updated.html_url, created=False, updated=True)
