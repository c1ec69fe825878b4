"""One draft pull request per operation: found by head branch and marker before creating.

GitHub refuses a second open pull request for the same head and base (422
"A pull request already exists"), which makes creation safe under a race:
the loser reads the winner's pull request back. A lost answer to the create
is reconciled the same way, by listing pull requests for the head branch.

A private repository on a plan without draft pull requests answers 422
"Draft pull requests are not supported in this repository."; the pull
request is then opened ready for review (``draft=False`` in the result) and
the caller says so: merging still waits for an approving review.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from githubkit.exception import GitHubException, GraphQLFailed, RequestFailed
from githubkit.rest.paginator import Paginator
from githubkit_schemas.v2026_03_10.models import PullRequest, PullRequestSimple

from app.engine import PermanentError
from app.github.client import InstallationGitHub
from app.github.errors import classified, classify, github_message, no_answer
from app.github.markers import Marker, OpId, find_marked, with_marker
from app.github.repos import RepoRef

_ALREADY_EXISTS = "a pull request already exists"
_DRAFTS_UNSUPPORTED = "draft pull requests are not supported"


def drafts_unsupported(exc: BaseException) -> bool:
    return (
        isinstance(exc, RequestFailed)
        and exc.response.status_code == 422
        and _DRAFTS_UNSUPPORTED in github_message(exc).lower()
    )


@dataclass(frozen=True)
class PullSnapshot:
    """A pull request as GitHub answered one request: the one model of a pull
    request in app/github, whether this call opened it
    (:func:`ensure_pull_request`) or read it fresh for a merge decision or a
    drift check (:func:`app.github.merge.read_pull`)."""

    number: int
    head_sha: str
    #: "open" or "closed". A closed pull request is returned, never reopened or
    #: replaced: a human closed it and the workflow decides what that means.
    state: str
    draft: bool
    merged: bool
    html_url: str = ""
    #: API version 2026-03-10 removed this field; see :func:`app.github.merge.read_pull`.
    merge_commit_sha: str | None = None
    #: ``None`` while GitHub is still computing whether it can merge (or not read).
    mergeable: bool | None = None
    #: This call created it.
    created: bool = False
    #: GitHub's global id (what GraphQL mutations name it by).
    node_id: str | None = None


def _result(pr: PullRequest | PullRequestSimple, *, created: bool) -> PullSnapshot:
    merged = pr.merged if isinstance(pr, PullRequest) else pr.merged_at is not None
    return PullSnapshot(
        number=pr.number,
        html_url=pr.html_url,
        head_sha=pr.head.sha,
        state=pr.state,
        draft=pr.draft is True,
        merged=merged,
        created=created,
        node_id=pr.node_id,
    )


async def find_pull_requests(
    gh: InstallationGitHub,
    repo: RepoRef,
    head: str,
    op: OpId,
    *,
    bot_login: str | None = None,
    head_owner: str | None = None,
) -> list[PullRequestSimple]:
    """Pull requests (any state) from branch ``head`` marked for ``op``, oldest first.

    ``head_owner``: the branch is in that account's fork (``None``: in ``repo``).
    """
    owner = head_owner or repo.owner
    pages: Paginator[PullRequestSimple] = gh.rest.paginate(
        gh.rest.pulls.async_list,
        owner=repo.owner,
        repo=repo.name,
        state="all",
        # GitHub ignores a head filter without the "owner:" prefix.
        head=f"{owner}:{head}",
        per_page=100,
    )
    with classified(mutation=False):
        pulls = [
            pr
            async for pr in pages
            if pr.head.ref == head
            and (bot_login is None or (pr.user is not None and pr.user.login == bot_login))
        ]
    return sorted(find_marked(pulls, op), key=lambda pr: pr.number)


async def _reconcile(
    gh: InstallationGitHub,
    repo: RepoRef,
    pr: PullRequestSimple,
    title: str,
    body: str,
    *,
    created: bool,
) -> PullSnapshot:
    if pr.state != "open" or (pr.title == title and pr.body == body):
        return _result(pr, created=created)
    with classified(mutation=True):
        response = await gh.rest.pulls.async_update(
            repo.owner, repo.name, pr.number, title=title, body=body
        )
    return _result(response.parsed_data, created=created)


async def ensure_pull_request(
    gh: InstallationGitHub,
    repo: RepoRef,
    *,
    head: str,
    base: str,
    title: str,
    body: str,
    op: OpId,
    fields: Mapping[str, str] | None = None,
    bot_login: str | None,
    head_owner: str | None = None,
) -> PullSnapshot:
    """The pull request for ``op`` from ``head`` into ``base``, created as a draft if absent
    (ready for review where the repository's plan has no drafts).

    ``head`` and ``base`` are branch names in ``repo``; with ``head_owner``,
    ``head`` is a branch of that account's fork of ``repo``. An existing open pull
    request gets ``title`` and ``body`` (the evidence summary) if they changed.
    ``bot_login`` (``GitHubClientFactory.bot_login()``) restricts the search to
    pull requests the App opened; ``None`` trusts any author.
    """
    text = with_marker(body, Marker(op, dict(fields or {})))
    found = await find_pull_requests(gh, repo, head, op, bot_login=bot_login, head_owner=head_owner)
    if found:
        return await _reconcile(gh, repo, found[0], title, text, created=False)
    # GitHub names a fork's branch ``owner:branch``.
    head_spec = f"{head_owner}:{head}" if head_owner else head
    try:
        try:
            response = await gh.rest.pulls.async_create(
                repo.owner, repo.name, head=head_spec, base=base, title=title, body=text, draft=True
            )
        except GitHubException as first:
            if not drafts_unsupported(first):
                raise
            # Refused before anything was created: the same request, not a draft.
            response = await gh.rest.pulls.async_create(
                repo.owner,
                repo.name,
                head=head_spec,
                base=base,
                title=title,
                body=text,
                draft=False,
            )
    except GitHubException as exc:
        lost = no_answer(exc)
        exists = (
            isinstance(exc, RequestFailed)
            and exc.response.status_code == 422
            and _ALREADY_EXISTS in github_message(exc).lower()
        )
        if not (lost or exists):
            raise classify(exc, mutation=True) from exc
        # Lost answer, or a twin won the race: read back what GitHub holds now.
        found = await find_pull_requests(
            gh, repo, head, op, bot_login=bot_login, head_owner=head_owner
        )
        if found:
            return await _reconcile(gh, repo, found[0], title, text, created=lost)
        if exists:
            raise PermanentError(
                f"an open pull request from {head_spec} exists in {repo} without our marker "
                f"for {op}; not adopting somebody else's pull request"
            ) from exc
        raise classify(exc, mutation=True) from exc
    return _result(response.parsed_data, created=True)


_READY = """
mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) {
    pullRequest { id isDraft }
  }
}
"""


async def mark_ready_for_review(
    gh: InstallationGitHub, repo: RepoRef, number: int, *, node_id: str | None = None
) -> bool:
    """Take the pull request out of draft (GraphQL: REST has no way); idempotent.

    ``node_id``: the pull request's, from a read the caller just made that saw
    it a draft: the mutation goes first, and the pull request is read only if
    GitHub refuses it (a retry after an earlier attempt's mutation landed
    finds it ready already). Without it, read first. Returns whether this
    call asked GitHub to change it.
    """
    if node_id is not None:
        try:
            await gh.async_graphql(_READY, {"id": node_id})
        except GraphQLFailed:
            return await mark_ready_for_review(gh, repo, number)
        except GitHubException as exc:
            raise classify(exc, mutation=True) from exc
        return True
    with classified(mutation=False):
        pr = (await gh.rest.pulls.async_get(repo.owner, repo.name, number)).parsed_data
    if not pr.draft:
        return False
    with classified(mutation=True):
        await gh.async_graphql(_READY, {"id": pr.node_id})
    return True
