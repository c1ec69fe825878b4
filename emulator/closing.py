"""Closing keywords: merging a pull request into the repository's default
branch closes the issues its body and its commits' messages name with
``close``, ``closes``, ``closed``, ``fix``, ``fixes``, ``fixed``,
``resolve``, ``resolves`` or ``resolved`` (any case, an optional colon)
followed by ``#N`` or ``owner/repo#N`` of this repository.

As on GitHub: only a merge into the default branch closes anything; the
issue is closed by the person (or app) who merged, with ``state_reason:
completed``, and an ``issues.closed`` delivery goes out like any close.
A pull request itself, or an issue already closed, is left alone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from emulator.gitview import open_git
from emulator.state import Issue, PullRequest, Repo, User

if TYPE_CHECKING:
    from emulator.rest.http import Ctx

KEYWORDS = ("close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved")
_REFERENCE = re.compile(
    r"(?<![\w/])(?:" + "|".join(KEYWORDS) + r")\s*:?\s+"
    r"(?:(?P<owner>[A-Za-z0-9-]+)/(?P<repo>[A-Za-z0-9._-]+))?#(?P<number>\d+)\b",
    re.IGNORECASE,
)


def referenced_numbers(text: str, repo: Repo) -> list[int]:
    """Issue numbers of ``repo`` that ``text`` closes, in order, once each."""
    found: list[int] = []
    for match in _REFERENCE.finditer(text or ""):
        owner, name = match.group("owner"), match.group("repo")
        if owner is not None and f"{owner}/{name}".lower() != repo.full_name.lower():
            continue  # another repository's issue: not modelled here
        number = int(match.group("number"))
        if number not in found:
            found.append(number)
    return found


def _messages(repo: Repo, base_sha: str, head_sha: str) -> list[str]:
    git = open_git(repo)
    return [git.commit_info(sha).message for sha in git.compare(base_sha, head_sha).commits]


def close_referenced_issues(
    ctx: Ctx, repo: Repo, pr: PullRequest, merger: User, *, base_sha: str, head_sha: str
) -> list[Issue]:
    """After ``pr`` merged: close what its closing keywords name (see above)."""
    from emulator.rest.issues import set_state

    if pr.base_ref != repo.default_branch:
        return []
    texts = [pr.issue.body or "", *_messages(repo, base_sha, head_sha)]
    closed: list[Issue] = []
    for number in referenced_numbers("\n".join(texts), repo):
        issue = repo.issues.get(number)
        if issue is None or issue.pull is not None or issue.state != "open":
            continue
        set_state(ctx, repo, issue, "closed", merger, reason="completed")
        closed.append(issue)
    return closed
