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

Real GitHub's answers that are not what they seem:

- 405 "Base branch was modified. Review and try the merge again." is a race
  with a push to the base, not a refusal: re-read the pull request and retry
  the pinned merge (a few times, then a transient failure for the runtime).
- ``mergeable: null`` means GitHub is still computing; wait and re-read (a
  bounded number of times) before merging.
- API version 2026-03-10 removed ``merge_commit_sha`` from pull requests; a
  merged pull request read back without it is read once more as 2022-11-28.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from githubkit.exception import GitHubException, RequestFailed

from app.engine import TransientError
from app.github.client import InstallationGitHub
from app.github.errors import classified, classify, github_message, no_answer
from app.github.pulls import PullSnapshot
from app.github.repos import RepoRef

MergeMethod = Literal["merge", "squash", "rebase"]

#: The last API version whose pull requests carry ``merge_commit_sha``.
MERGE_SHA_VERSION = "2022-11-28"
_BASE_MODIFIED = "base branch was modified"


@dataclass(frozen=True)
class MergePatience:
    """How long to wait on GitHub's transient states inside one attempt."""

    #: Re-reads while ``mergeable`` is null, and the pause between them (seconds).
    mergeable_reads: int = 5
    mergeable_pause: float = 1.0
    #: Pinned merges tried when GitHub answers 405 "Base branch was modified".
    base_modified_tries: int = 3
    base_modified_pause: float = 1.0


DEFAULT_PATIENCE = MergePatience()


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


async def read_pull(gh: InstallationGitHub, repo: RepoRef, number: int) -> PullSnapshot:
    """The pull request as GitHub holds it now.

    githubkit asks for API version 2026-03-10, which no longer returns
    ``merge_commit_sha``; for a merged pull request the field is read once
    more under 2022-11-28 (supported by GitHub until at least March 2028).
    """
    with classified(mutation=False):
        response = await gh.rest.pulls.async_get(repo.owner, repo.name, number)
    pr = response.parsed_data
    merge_sha = _merge_sha(response.json())
    if pr.merged and merge_sha is None:
        with classified(mutation=False):
            old = await gh.rest.pulls.async_get(
                repo.owner,
                repo.name,
                number,
                headers={"X-GitHub-Api-Version": MERGE_SHA_VERSION},
            )
        merge_sha = _merge_sha(old.json())
    return PullSnapshot(
        number=pr.number,
        state=pr.state,
        merged=pr.merged,
        draft=pr.draft is True,
        head_sha=pr.head.sha,
        merge_commit_sha=merge_sha,
        mergeable=pr.mergeable,
        node_id=pr.node_id,
    )


def _merge_sha(raw: object) -> str | None:
    value = raw.get("merge_commit_sha") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None


def base_modified(exc: BaseException) -> bool:
    """GitHub's 405 that means "the base moved under the merge, try again"."""
    return (
        isinstance(exc, RequestFailed)
        and exc.response.status_code == 405
        and _BASE_MODIFIED in github_message(exc).lower()
    )


def _settled(pr: PullSnapshot, approved_sha: str) -> MergeOutcome | None:
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
    *,
    patience: MergePatience = DEFAULT_PATIENCE,
) -> MergeOutcome:
    """Merge pull request ``number`` if and only if its head is ``approved_sha``."""
    tries = max(1, patience.base_modified_tries)
    for attempt in range(1, tries + 1):
        pr = await _read_until_known(gh, repo, number, patience)
        settled = _settled(pr, approved_sha)
        if settled is not None:
            return settled
        try:
            with_sha = await gh.rest.pulls.async_merge(
                repo.owner, repo.name, number, sha=approved_sha, merge_method=method
            )
        except GitHubException as exc:
            if base_modified(exc) and attempt < tries:
                # A push to the base raced the merge: the next read sees the new base.
                await asyncio.sleep(patience.base_modified_pause)
                continue
            return await _after_refusal(gh, repo, number, approved_sha, exc)
        return Merged(with_sha.parsed_data.sha)
    raise AssertionError("unreachable: the last try returns or raises")  # pragma: no cover


async def _read_until_known(
    gh: InstallationGitHub, repo: RepoRef, number: int, patience: MergePatience
) -> PullSnapshot:
    """Read the pull request, re-reading while GitHub still computes ``mergeable``.

    Still unknown after the allowed reads, the state is returned as is: the
    pinned merge itself is then the judge (GitHub refuses what it cannot merge).
    """
    pr = await read_pull(gh, repo, number)
    for _ in range(patience.mergeable_reads):
        if pr.mergeable is not None or pr.merged or pr.state != "open":
            break
        await asyncio.sleep(patience.mergeable_pause)
        pr = await read_pull(gh, repo, number)
    return pr


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
    if isinstance(exc, RequestFailed) and status == 405 and not base_modified(exc):
        return NotMergeable(github_message(exc))
    # The base kept moving under the merge (405 "Base branch was modified", our
    # tries used up), or an unanswered merge shows unmerged and may still be
    # running: the runtime retries the activity with backoff.
    raise TransientError(
        f"merge of {repo}#{number} at {approved_sha} not done yet: "
        + (github_message(exc) if isinstance(exc, RequestFailed) else repr(exc))
    ) from exc
