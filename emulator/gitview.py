"""What git says about pull requests, and what happens when refs move.

REST reads of refs and pull request shas read the repository's refs on every
call (a branch's loose ref file directly, anything else through git), so they
agree with pushes at every moment. Every ref change, whichever way it came
(smart HTTP push, REST ``git/refs``, a merge, the scripting API), goes
through :func:`refs_updated`, which announces it like GitHub does: ``push``,
then ``pull_request.synchronize`` for open pull requests whose head moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.git import BareRepo, CommitInfo, InvalidRefName
from emulator.render import base, pulls
from emulator.render.pulls import PullGit
from emulator.state import PullRequest, Repo, User

if TYPE_CHECKING:
    from emulator.app import Emulator

ZERO = "0" * 40


@dataclass(frozen=True)
class RefChange:
    ref: str
    old_sha: str | None
    new_sha: str | None


def open_git(repo: Repo) -> BareRepo:
    return BareRepo(repo.path, repo.git_history)


def exact_ref(repo: Repo, name: str) -> str | None:
    """Where the ref named exactly ``name`` points; None for no such ref, and for a
    name git would refuse (no ref can have it)."""
    try:
        return open_git(repo).ref_sha(name)
    except InvalidRefName:
        return None


def pull_git(repo: Repo, pr: PullRequest, *, mergeable: bool = True) -> PullGit:
    """Head and base shas from git (falling back to the last known once a branch is gone)."""
    git = open_git(repo)
    if pr.issue.state != "open":
        return PullGit(head_sha=pr.head_sha, base_sha=pr.base_sha, mergeable=None, commits=1)
    _resolve_shas(git, pr)
    mirror_fork_head(repo, pr)
    verdict: bool | None = None
    if mergeable:
        refused = (pr.base_sha, pr.head_sha) in pr.merge_refused
        verdict = not refused and git.mergeable(pr.base_sha, pr.head_sha)
    ahead = git.compare(pr.base_sha, pr.head_sha).ahead_by
    return PullGit(head_sha=pr.head_sha, base_sha=pr.base_sha, mergeable=verdict, commits=ahead)


def _resolve_shas(git: BareRepo, pr: PullRequest) -> None:
    """An open pull request's head and base as its branches are now: read from
    git at every call (a push may have moved them), in one git process when
    both branches are in the same repository."""
    head_ref, base_ref = f"refs/heads/{pr.head_ref}", f"refs/heads/{pr.base_ref}"
    if pr.head_repo is None:
        head, base = git.resolve_all([head_ref, base_ref])
    else:
        head, base = open_git(pr.head_repo).resolve(head_ref), git.resolve(base_ref)
    pr.head_sha = head or pr.head_sha
    pr.base_sha = base or pr.base_sha


def mirror_fork_head(repo: Repo, pr: PullRequest) -> None:
    """A fork's pull request: keep its head commit in the base repository as
    ``refs/pull/<n>/head`` (as GitHub does), so mergeability, the merge and
    check runs there find its objects. No branch of the base is touched."""
    if pr.head_repo is None:
        return
    git, ref = open_git(repo), f"refs/pull/{pr.number}/head"
    if git.ref_sha(ref) != pr.head_sha:
        git.copy_commit(open_git(pr.head_repo), pr.head_sha, ref)


def pusher_of(emu: Emulator, user: User) -> dict[str, str]:
    return {"name": user.login, "email": user.email or base.noreply_email(user)}


def refs_updated(emu: Emulator, repo: Repo, sender: User, changes: list[RefChange]) -> None:
    """Announce ref changes: one ``push`` each, then PR ``synchronize`` where heads moved."""
    if not changes:
        return
    repo.pushed_at = repo.updated_at = emu.store.now()
    git = open_git(repo)
    urls = emu.webhook_urls()
    for change in changes:
        before, after = change.old_sha or ZERO, change.new_sha or ZERO
        commits = [
            push_commit(urls, repo, git.commit_info(sha)) for sha in _pushed(git, repo, change)
        ]
        forced = bool(
            change.old_sha
            and change.new_sha
            and not git.is_ancestor(change.old_sha, change.new_sha)
        )
        body = {
            "ref": change.ref,
            "before": before,
            "after": after,
            "created": change.old_sha is None,
            "deleted": change.new_sha is None,
            "forced": forced,
            "base_ref": None,
            "compare": f"{urls.repo_web(repo)}/compare/{before[:12]}...{after[:12]}",
            "commits": commits,
            "head_commit": commits[-1] if commits else None,
            "pusher": pusher_of(emu, sender),
        }
        emu.events.for_repo(repo, "push", body, sender=sender)
    for change in changes:
        if not change.ref.startswith("refs/heads/") or change.new_sha is None:
            continue
        branch = change.ref.removeprefix("refs/heads/")
        # Pull requests whose head is this branch: this repository's own, and
        # (this repository being a fork) those opened from it on other
        # repositories of its network, which are told on the base repository.
        for base_repo, pr in _pulls_headed_by(emu, repo):
            if pr.issue.state != "open" or pr.head_ref != branch or pr.head_sha == change.new_sha:
                continue
            before = pr.head_sha
            pr.issue.updated_at = emu.store.now()
            view = pull_git(base_repo, pr, mergeable=False)
            emu.events.for_repo(
                base_repo,
                "pull_request",
                {
                    "action": "synchronize",
                    "number": pr.number,
                    "before": before,
                    "after": view.head_sha,
                    "pull_request": pulls.pull(urls, base_repo, pr, view),
                },
                sender=sender,
            )


def _pulls_headed_by(emu: Emulator, repo: Repo) -> list[tuple[Repo, PullRequest]]:
    found = [(repo, pr) for pr in repo.pulls() if pr.head_repo is None]
    if repo.fork:
        for other in emu.store.repos.values():
            found += [(other, pr) for pr in other.pulls() if pr.head_repo is repo]
    return found


def _pushed(git: BareRepo, repo: Repo, change: RefChange) -> tuple[str, ...]:
    """Commits a push brought: new to the ref, or (for a new branch) to the default branch."""
    if change.new_sha is None:
        return ()
    since = change.old_sha or git.resolve(f"refs/heads/{repo.default_branch}")
    if since is None or since == change.new_sha:
        return (change.new_sha,) if change.old_sha is None and since is None else ()
    return git.compare(since, change.new_sha).commits[-20:]


def push_commit(urls: base.Urls, repo: Repo, info: CommitInfo) -> dict[str, object]:
    """One entry of a push payload's ``commits``."""
    return {
        "id": info.sha,
        "tree_id": info.tree,
        "distinct": True,
        "message": info.message,
        "timestamp": base.ts(info.committer_date),
        "url": f"{urls.repo_web(repo)}/commit/{info.sha}",
        "author": {"name": info.author_name, "email": info.author_email, "username": None},
        "committer": {"name": info.committer_name, "email": info.committer_email, "username": None},
        "added": [],
        "removed": [],
        "modified": [],
    }
