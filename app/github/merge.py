"""Sha-pinned merge: merge exactly the commit a human approved, or nothing.

The pull request is read first and compared with the approval; the merge
request carries ``sha=<approved commit>`` so GitHub itself refuses (409) if
the head moved in between. The outcome is a value the workflow branches on:

- :class:`Merged`: done (also when a lost answer or a racing twin merged it);
- :class:`HeadMoved`: the head is not the approved commit; ask for a new review;
- :class:`NotMergeable`: closed, draft, conflicting or blocked; a human decides.

Transport trouble and unexpected answers raise the runtime's failure classes.
A lost answer to the merge is settled by reading the pull request back;
while it still shows unmerged, the failure is transient and the next attempt
starts again from the read, where a pinned merge cannot double.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from githubkit.exception import GitHubException, RequestFailed

from app.engine.errors import TransientError
from app.github.client import InstallationGitHub
from app.github.errors import classified, classify, github_message, no_answer
from app.github.repos import RepoRef

MergeMethod = Literal["merge", "squash", "rebase"]


@dataclass(frozen=True)
class Merged:
    #: The commit now on the base branch (GitHub's ``merge_commit_sha``; ``None``
    #: only if GitHub's read-back of an earlier merge did not include it).
    merge_commit_sha: str | None
    #: It was already merged when we looked (a lost answer or a twin's merge).
    already: bool = False


@dataclass(frozen=True)
class HeadMoved:
    approved_sha: str
    head_sha: str


@dataclass(frozen=True)
class NotMergeable:
    reason: str


MergeOutcome = Merged | HeadMoved | NotMergeable


@dataclass(frozen=True)
class PullState:
    """What a merge decision needs from a pull request, read fresh."""

    number: int
    state: str
    merged: bool
    draft: bool
    head_sha: str
    #: API version 2026-03-10 dropped this field from githubkit's model, but
    #: GitHub (and the emulator) still send it; read from the raw JSON.
    merge_commit_sha: str | None


async def read_pull(gh: InstallationGitHub, repo: RepoRef, number: int) -> PullState:
    with classified(mutation=False):
        response = await gh.rest.pulls.async_get(repo.owner, repo.name, number)
    pr = response.parsed_data
    raw = response.json()
    merge_sha = raw.get("merge_commit_sha") if isinstance(raw, dict) else None
    return PullState(
        number=pr.number,
        state=pr.state,
        merged=pr.merged,
        draft=pr.draft is True,
        head_sha=pr.head.sha,
        merge_commit_sha=merge_sha if isinstance(merge_sha, str) else None,
    )


def _settled(pr: PullState, approved_sha: str) -> MergeOutcome | None:
    """The outcome the pull request's current state already decides, if any."""
    if pr.merged:
        if pr.head_sha != approved_sha:
            return HeadMoved(approved_sha, pr.head_sha)
        return Merged(pr.merge_commit_sha, already=True)
    if pr.state != "open":
        return NotMergeable("the pull request is closed")
    if pr.head_sha != approved_sha:
        return HeadMoved(approved_sha, pr.head_sha)
    if pr.draft:
        return NotMergeable("the pull request is still a draft")
    return None


async def merge_pinned(
    gh: InstallationGitHub,
    repo: RepoRef,
    number: int,
    approved_sha: str,
    method: MergeMethod = "squash",
) -> MergeOutcome:
    """Merge pull request ``number`` if and only if its head is ``approved_sha``."""
    pr = await read_pull(gh, repo, number)
    settled = _settled(pr, approved_sha)
    if settled is not None:
        return settled
    try:
        with_sha = await gh.rest.pulls.async_merge(
            repo.owner, repo.name, number, sha=approved_sha, merge_method=method
        )
    except GitHubException as exc:
        return await _after_refusal(gh, repo, number, approved_sha, exc)
    result = with_sha.parsed_data
    return Merged(result.sha)


async def _after_refusal(
    gh: InstallationGitHub, repo: RepoRef, number: int, approved_sha: str, exc: GitHubException
) -> MergeOutcome:
    status = exc.response.status_code if isinstance(exc, RequestFailed) else None
    if status not in (405, 409) and not no_answer(exc):
        raise classify(exc, mutation=True) from exc
    # Whatever GitHub said (or did not say), what it holds now decides.
    pr = await read_pull(gh, repo, number)
    settled = _settled(pr, approved_sha)
    if settled is not None:
        return settled
    if isinstance(exc, RequestFailed) and status == 405:
        return NotMergeable(github_message(exc))
    # 409 with the head still approved means the *base* moved under the merge;
    # an unanswered merge that shows unmerged may still be running. Both: try again.
    raise TransientError(
        f"merge of {repo}#{number} at {approved_sha} not done yet: "
        + (github_message(exc) if isinstance(exc, RequestFailed) else repr(exc))
    ) from exc
