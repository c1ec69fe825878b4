"""``PUT /pulls/{n}/merge``: a real merge, squash or rebase in git, pinned by ``sha``.

The checks run in GitHub's order: the caller's permission (403), the PR's state
(405), the ``sha`` pin against the head in git (409, the only 409 GitHub gives
here), then mergeability (405). The base branch moves with a compare-and-swap,
so a push racing the merge makes it fail with GitHub's 405 "Base branch was
modified. Review and try the merge again." (a retry succeeds) instead of being
overwritten. A ``fail`` fault with that status and message scripts the race.
"""

from __future__ import annotations

from emulator.closing import close_referenced_issues
from emulator.git import Identity, MergeConflict, RefConflict
from emulator.gitview import RefChange, open_git, pull_git, refs_updated
from emulator.render.base import noreply_email
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, validation
from emulator.rest.pulls import announce_pull, find_pull
from emulator.state import User

GITHUB_COMMITTER = Identity("GitHub", "noreply@github.com")


def _identity(user: User) -> Identity:
    return Identity(user.name or user.login, user.email or noreply_email(user))


def merge_pull(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents", level="write", role="write")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    body, actor, store = ctx.json(), ctx.actor(), ctx.emu.store
    method = body.get("merge_method", "merge")
    if method not in ("merge", "squash", "rebase"):
        raise validation(resource="PullRequest", code="invalid", field="merge_method")
    if pr.merged or pr.issue.state != "open":
        raise ApiError(405, "Pull Request is not mergeable")
    if pr.draft:
        raise ApiError(405, "Pull Request is still a draft")
    view = pull_git(repo, pr)
    pinned = body.get("sha")
    if pinned is not None and pinned != view.head_sha:
        raise ApiError(409, "Head branch was modified. Review and try the merge again.")
    if not view.mergeable:
        raise ApiError(405, "Pull Request is not mergeable")
    if method == "merge":
        head_owner = (pr.head_repo or repo).owner.login
        title = f"Merge pull request #{pr.number} from {head_owner}/{pr.head_ref}"
        message = pr.issue.title
        author = _identity(actor)
    else:
        title = f"{pr.issue.title} (#{pr.number})"
        message = ""
        author = _identity(pr.issue.user)
    title = str(body.get("commit_title") or title)
    message = str(body.get("commit_message") if body.get("commit_message") is not None else message)
    git = open_git(repo)
    try:
        new_sha = git.merge(
            f"refs/heads/{pr.base_ref}",
            view.head_sha,
            method=method,
            title=title,
            message=message,
            author=author,
            committer=GITHUB_COMMITTER,
        )
    except MergeConflict:
        pr.merge_refused.add((view.base_sha, view.head_sha))
        raise ApiError(405, "Pull Request is not mergeable") from None
    except RefConflict:
        raise ApiError(405, "Base branch was modified. Review and try the merge again.") from None
    now = store.now()
    pr.merged, pr.merged_at, pr.merged_by, pr.merge_commit_sha = True, now, actor, new_sha
    pr.issue.state, pr.issue.closed_at, pr.issue.closed_by, pr.issue.updated_at = (
        "closed",
        now,
        actor,
        now,
    )
    pr.issue.state_reason = None
    refs_updated(
        ctx.emu, repo, actor, [RefChange(f"refs/heads/{pr.base_ref}", view.base_sha, new_sha)]
    )
    announce_pull(ctx.emu, repo, pr, "closed", actor)
    close_referenced_issues(ctx, repo, pr, actor, base_sha=view.base_sha, head_sha=view.head_sha)
    return Reply(
        200, {"sha": new_sha, "merged": True, "message": "Pull Request successfully merged"}
    )


def check_merged(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    if not pr.merged:
        raise not_found()
    return Reply(204)


ROUTES = [
    Spec("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge", merge_pull),
    Spec("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/merge", check_merged),
]
