"""Pull requests and reviews.

A pull request's shas and mergeability come from git at the time of the call
(see ``emulator.pulls_git``), never from a stored copy, so a push is visible in
the next read.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.render.base import Json, Urls, author_association, node_id, ts, user
from emulator.render.issues import comment_count, issue_labels
from emulator.render.repos import repository
from emulator.state import PullRequest, Repo, Review


@dataclass(frozen=True)
class PullGit:
    """What git says about a pull request right now."""

    head_sha: str
    base_sha: str
    mergeable: bool | None
    commits: int = 1
    additions: int = 0
    deletions: int = 0
    changed_files: int = 0


def mergeable_state(pr: PullRequest, git: PullGit) -> str:
    if pr.merged or pr.issue.state == "closed":
        return "unknown"
    if pr.draft:
        return "draft"
    if git.mergeable is None:
        return "unknown"
    return "clean" if git.mergeable else "dirty"


def _branch(urls: Urls, repo: Repo, ref: str, sha: str) -> Json:
    return {
        "label": f"{repo.owner.login}:{ref}",
        "ref": ref,
        "sha": sha,
        "user": user(urls, repo.owner),
        "repo": repository(urls, repo),
    }


def pull_simple(urls: Urls, repo: Repo, pr: PullRequest, git: PullGit) -> Json:
    """The list form (``pull-request-simple``), also what review webhooks embed."""
    iss = pr.issue
    api = f"{urls.repo_api(repo)}/pulls/{iss.number}"
    issue_api = f"{urls.repo_api(repo)}/issues/{iss.number}"
    web = f"{urls.repo_web(repo)}/pull/{iss.number}"
    statuses = f"{urls.repo_api(repo)}/statuses/{git.head_sha}"
    return {
        "url": api,
        "id": pr.id,
        "node_id": node_id("PullRequest", pr.id),
        "html_url": web,
        "diff_url": f"{web}.diff",
        "patch_url": f"{web}.patch",
        "issue_url": issue_api,
        "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{urls.repo_api(repo)}/pulls/comments{{/number}}",
        "comments_url": f"{issue_api}/comments",
        "statuses_url": statuses,
        "number": iss.number,
        "state": iss.state,
        "locked": iss.locked,
        "title": iss.title,
        "user": user(urls, iss.user),
        "body": iss.body,
        "labels": issue_labels(urls, repo, iss),
        "milestone": None,
        "active_lock_reason": None,
        "created_at": ts(iss.created_at),
        "updated_at": ts(iss.updated_at),
        "closed_at": ts(iss.closed_at),
        "merged_at": ts(pr.merged_at),
        "merge_commit_sha": pr.merge_commit_sha,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        # A fork's pull request: the head branch and its repository are the fork's.
        "head": _branch(urls, pr.head_repo or repo, pr.head_ref, git.head_sha),
        "base": _branch(urls, repo, pr.base_ref, git.base_sha),
        "_links": {
            "self": {"href": api},
            "html": {"href": web},
            "issue": {"href": issue_api},
            "comments": {"href": f"{issue_api}/comments"},
            "review_comments": {"href": f"{api}/comments"},
            "review_comment": {"href": f"{urls.repo_api(repo)}/pulls/comments{{/number}}"},
            "commits": {"href": f"{api}/commits"},
            "statuses": {"href": statuses},
        },
        "author_association": author_association(repo, iss.user),
        "auto_merge": None,
        "draft": pr.draft,
    }


def pull(urls: Urls, repo: Repo, pr: PullRequest, git: PullGit) -> Json:
    """The full form (``GET /pulls/{n}`` and ``pull_request`` webhooks)."""
    out = pull_simple(urls, repo, pr, git)
    out.update(
        {
            "merged": pr.merged,
            "mergeable": None if pr.merged else git.mergeable,
            "rebaseable": None if pr.merged else git.mergeable,
            "mergeable_state": mergeable_state(pr, git),
            "merged_by": user(urls, pr.merged_by) if pr.merged_by else None,
            "comments": comment_count(repo, pr.number),
            "review_comments": 0,
            "maintainer_can_modify": pr.maintainer_can_modify,
            "commits": git.commits,
            "additions": git.additions,
            "deletions": git.deletions,
            "changed_files": git.changed_files,
        }
    )
    return out


def review(urls: Urls, repo: Repo, r: Review) -> Json:
    pulls = f"{urls.repo_api(repo)}/pulls/{r.pull_number}"
    web = f"{urls.repo_web(repo)}/pull/{r.pull_number}#pullrequestreview-{r.id}"
    return {
        "id": r.id,
        "node_id": node_id("PullRequestReview", r.id),
        "user": user(urls, r.user),
        "body": r.body,
        "state": r.state,
        "html_url": web,
        "pull_request_url": pulls,
        "_links": {"html": {"href": web}, "pull_request": {"href": pulls}},
        "submitted_at": ts(r.submitted_at),
        "commit_id": r.commit_id,
        "author_association": author_association(repo, r.user),
    }
