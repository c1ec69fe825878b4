"""GitHub activities: every read and mutation the workflows make on GitHub.

Each mutation is safe to retry: it finds its operation marker (or reads state
back) before acting, and declares a reconcile function that answers, after a
lost response, whether the effect happened.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from githubkit.exception import GitHubException

from app.engine.activity_context import ActivityContext
from app.engine.errors import PermanentError, TransientError
from app.engine.policy import RetryPolicy, Timeouts
from app.engine.registry import Absent, Found, ReconcileResult, Unknown, activity
from app.evidence import EvidenceStore
from app.github.branches import Deletion, delete_branch_if_at
from app.github.checks import CheckRunView, ensure_check_run
from app.github.client import GitHubClientFactory
from app.github.comments import ensure_comment, find_comments
from app.github.errors import classified, classify, status_of
from app.github.gitcmd import fetch_commit, git_env, run_git
from app.github.markers import OpId
from app.github.merge import HeadMoved, Merged, merge_pinned, read_pull
from app.github.publish import (
    Identity,
    Patch,
    build_commit,
    publish_branch,
    remote_ref,
)
from app.github.pulls import ensure_pull_request, find_pull_requests, mark_ready_for_review
from app.github.repos import RepoRef

API = RetryPolicy(initial_interval=1.0, backoff=2.0, max_interval=60.0, max_attempts=8)
API_TIMEOUTS = Timeouts(start_to_close=120, schedule_to_close=3600)
GIT_TIMEOUTS = Timeouts(start_to_close=600, schedule_to_close=3600)
BOT = Identity("repairbot", "repairbot@users.noreply.github.com")


@dataclass(frozen=True)
class GitHubAccess:
    """What GitHub activities share in a worker: the client factory and git's URL."""

    factory: GitHubClientFactory
    git_url: str

    def clone_url(self, repo: str) -> str:
        return f"{self.git_url.rstrip('/')}/{repo}.git"


def _access(actx: ActivityContext) -> GitHubAccess:
    return actx.dep(GitHubAccess)


def _op(raw: dict[str, Any]) -> OpId:
    return OpId(str(raw["op_run"]), str(raw["op_step"]))


# -- reads --------------------------------------------------------------------


@activity("github.permission", retry=API, timeouts=API_TIMEOUTS)
async def permission(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """A user's permission on the repository (admin, write, read or none), from the API."""
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    repo = RepoRef.parse(raw["repo"])
    try:
        response = await gh.rest.repos.async_get_collaborator_permission_level(
            repo.owner, repo.name, raw["user"]
        )
    except GitHubException as exc:
        if status_of(exc) == 404:
            return {"permission": "none"}
        raise classify(exc, mutation=False) from exc
    return {"permission": response.parsed_data.permission}


@activity("github.branch_head", retry=API, timeouts=API_TIMEOUTS)
async def branch_head(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """The commit a branch points at now."""
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    repo = RepoRef.parse(raw["repo"])
    with classified(mutation=False):
        response = await gh.rest.git.async_get_ref(repo.owner, repo.name, f"heads/{raw['branch']}")
    return {"sha": response.parsed_data.object_.sha}


@activity("github.read_pull", retry=API, timeouts=API_TIMEOUTS)
async def read_pull_request(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    state = await read_pull(gh, RepoRef.parse(raw["repo"]), int(raw["number"]))
    return {
        "number": state.number,
        "state": state.state,
        "merged": state.merged,
        "draft": state.draft,
        "head_sha": state.head_sha,
        "merge_commit_sha": state.merge_commit_sha,
    }


# -- comments -----------------------------------------------------------------


async def _comment_exists(actx: ActivityContext, raw: dict[str, Any]) -> ReconcileResult:
    access = _access(actx)
    gh = access.factory.for_installation(int(raw["installation_id"]))
    found = await find_comments(
        gh,
        RepoRef.parse(raw["repo"]),
        int(raw["issue_number"]),
        _op(raw),
        bot_login=await access.factory.bot_login(),
    )
    if not found:
        return Absent()
    return Found({"id": found[0].id, "url": found[0].html_url, "created": True})


@activity("github.comment", retry=API, timeouts=API_TIMEOUTS, reconcile=_comment_exists)
async def comment(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Exactly one comment for the operation, created or updated in place."""
    access = _access(actx)
    result = await ensure_comment(
        access.factory.for_installation(int(raw["installation_id"])),
        RepoRef.parse(raw["repo"]),
        int(raw["issue_number"]),
        _op(raw),
        raw["body"],
        bot_login=await access.factory.bot_login(),
    )
    return {"id": result.id, "url": result.html_url, "created": result.created}


# -- branches -----------------------------------------------------------------


#: What each git step may do with the repository it works on (and nothing else).
_READ = {"contents": "read"}
_WRITE = {"contents": "write"}


async def _git_token(access: GitHubAccess, raw: dict[str, Any], permissions: dict[str, str]) -> str:
    """A token for the run's one repository with ``permissions`` only."""
    token = await access.factory.installation_token(
        int(raw["installation_id"]), repository=raw["repo"], permissions=permissions
    )
    return token.token


async def _fetch_base(
    access: GitHubAccess, repo: str, base_sha: str, token: str, into: Path
) -> Path:
    """A bare repository holding ``base_sha`` (fetched fresh: nothing survives a crash)."""
    bare = into / "objects.git"
    init = await run_git(["init", "--quiet", "--bare", str(bare)], cwd=into, env=git_env())
    if not init.ok:
        raise PermanentError(f"git init failed: {init.stderr.strip()}")
    fetched = await fetch_commit(bare, access.clone_url(repo), base_sha, token=token)
    if fetched.status == "unreachable":
        raise TransientError(f"cannot fetch {base_sha} from {repo}: {fetched.detail}")
    if fetched.status == "missing":
        raise PermanentError(f"cannot fetch {base_sha} from {repo}: {fetched.detail}")
    return bare


async def _intended_commit(
    actx: ActivityContext, raw: dict[str, Any], workdir: Path, *, push: bool = False
) -> tuple[Path, str, str]:
    access = _access(actx)
    token = await _git_token(access, raw, _WRITE if push else _READ)
    bare = await _fetch_base(access, raw["repo"], raw["base_sha"], token, workdir)
    patch = actx.dep(EvidenceStore).get(raw["patch_sha"])
    sha = await build_commit(
        bare,
        raw["base_sha"],
        Patch(patch),
        raw["message"],
        BOT,
        datetime.fromisoformat(raw["timestamp"]),
    )
    return bare, sha, token


@activity("github.build_commit", retry=API, timeouts=GIT_TIMEOUTS)
async def build_intended_commit(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """The commit we mean to publish, built deterministically; recorded before any push."""
    with tempfile.TemporaryDirectory(prefix="repairbot-commit-") as tmp:
        _, sha, _ = await _intended_commit(actx, raw, Path(tmp))
    return {"sha": sha}


async def _branch_state(actx: ActivityContext, raw: dict[str, Any]) -> ReconcileResult:
    access = _access(actx)
    token = await _git_token(access, raw, _READ)
    at = await remote_ref(access.clone_url(raw["repo"]), raw["branch"], token=token)
    if at == raw["sha"]:
        return Found({"status": "already-there", "sha": at, "remote_sha": at})
    if at == (raw.get("expected") or None):
        return Absent()
    return Unknown(
        f"branch {raw['branch']} is at {at or 'nothing'}; we expected "
        f"{raw.get('expected') or 'no branch'} or our commit {raw['sha']}"
    )


@activity("github.push_branch", retry=API, timeouts=GIT_TIMEOUTS, reconcile=_branch_state)
async def push_branch(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Conditionally move the branch from ``expected`` (None: must not exist) to ``sha``."""
    with tempfile.TemporaryDirectory(prefix="repairbot-push-") as tmp:
        bare, sha, token = await _intended_commit(actx, raw, Path(tmp), push=True)
        if sha != raw["sha"]:
            raise PermanentError(f"rebuilt commit {sha} differs from the recorded {raw['sha']}")
        outcome = await publish_branch(
            bare,
            _access(actx).clone_url(raw["repo"]),
            raw["branch"],
            sha,
            expected=raw.get("expected") or None,
            token=token,
        )
    return {"status": outcome.status.value, "sha": outcome.sha, "remote_sha": outcome.remote_sha}


@activity("github.delete_branch", retry=API, timeouts=GIT_TIMEOUTS)
async def delete_branch(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Delete our branch only if it is still at the commit we put there (``sha``).

    Usable after a merge and after cancellation. Input: ``installation_id``,
    ``repo``, ``branch``, ``sha``. Result: ``deleted`` (True also when it was
    already gone), ``status`` (deleted | absent | moved), ``remote_sha`` and,
    when left alone, ``reason``.
    """
    access = _access(actx)
    token = await _git_token(access, raw, _WRITE)
    outcome = await delete_branch_if_at(
        access.clone_url(raw["repo"]), raw["branch"], raw["sha"], token=token
    )
    result: dict[str, Any] = {
        "deleted": outcome.deleted,
        "status": outcome.status.value,
        "remote_sha": outcome.remote_sha,
    }
    if outcome.status is Deletion.MOVED:
        result["reason"] = f"somebody moved {raw['branch']} to {outcome.remote_sha}"
    return result


# -- pull requests, checks, merge ----------------------------------------------


async def _pull_exists(actx: ActivityContext, raw: dict[str, Any]) -> ReconcileResult:
    access = _access(actx)
    found = await find_pull_requests(
        access.factory.for_installation(int(raw["installation_id"])),
        RepoRef.parse(raw["repo"]),
        raw["head"],
        _op(raw),
        bot_login=await access.factory.bot_login(),
    )
    if not found:
        return Absent()
    pr = found[0]
    # The same shape as the activity's own result: the workflow cannot tell them apart.
    return Found(
        {
            "number": pr.number,
            "url": pr.html_url,
            "head_sha": pr.head.sha,
            "state": pr.state,
            "merged": pr.merged_at is not None,
            "created": True,
            "draft": pr.draft is True,
        }
    )


@activity("github.pull_request", retry=API, timeouts=API_TIMEOUTS, reconcile=_pull_exists)
async def pull_request(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """The draft pull request for the run's branch, with the evidence in its body.

    ``draft`` in the result is False where the repository's plan has no drafts
    (GitHub's 422): the pull request is open for review, and merging still
    waits for an approving review.
    """
    access = _access(actx)
    result = await ensure_pull_request(
        access.factory.for_installation(int(raw["installation_id"])),
        RepoRef.parse(raw["repo"]),
        head=raw["head"],
        base=raw["base"],
        title=raw["title"],
        body=raw["body"],
        op=_op(raw),
        bot_login=await access.factory.bot_login(),
    )
    return {
        "number": result.number,
        "url": result.html_url,
        "head_sha": result.head_sha,
        "state": result.state,
        "merged": result.merged,
        "created": result.created,
        "draft": result.draft,
    }


@activity("github.ready_for_review", retry=API, timeouts=API_TIMEOUTS)
async def ready_for_review(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Take the approved draft out of draft so it can be merged (idempotent)."""
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    changed = await mark_ready_for_review(gh, RepoRef.parse(raw["repo"]), int(raw["number"]))
    return {"changed": changed}


@activity("github.close_pull", retry=API, timeouts=API_TIMEOUTS)
async def close_pull(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    repo = RepoRef.parse(raw["repo"])
    with classified(mutation=True):
        await gh.rest.pulls.async_update(repo.owner, repo.name, int(raw["number"]), state="closed")
    return {"closed": True}


@activity("github.check_run", retry=API, timeouts=API_TIMEOUTS)
async def check_run(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """The run's check on its proposed commit (found by operation id, updated in place)."""
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    view = CheckRunView(
        name=raw["name"],
        title=raw["title"],
        summary=raw["summary"],
        conclusion=raw.get("conclusion"),
    )
    result = await ensure_check_run(gh, RepoRef.parse(raw["repo"]), raw["head_sha"], _op(raw), view)
    return {"id": result.id}


async def _merged_already(actx: ActivityContext, raw: dict[str, Any]) -> ReconcileResult:
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    state = await read_pull(gh, RepoRef.parse(raw["repo"]), int(raw["number"]))
    if state.merged:
        return Found({"outcome": "merged", "merge_commit_sha": state.merge_commit_sha})
    return Absent()


@activity("github.merge", retry=API, timeouts=API_TIMEOUTS, reconcile=_merged_already)
async def merge(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Merge only if the head is still the approved commit (``sha``-pinned)."""
    gh = _access(actx).factory.for_installation(int(raw["installation_id"]))
    outcome = await merge_pinned(
        gh, RepoRef.parse(raw["repo"]), int(raw["number"]), raw["sha"], raw["method"]
    )
    if isinstance(outcome, Merged):
        return {"outcome": "merged", "merge_commit_sha": outcome.merge_commit_sha}
    if isinstance(outcome, HeadMoved):
        return {"outcome": "head-moved", "head_sha": outcome.head_sha}
    return {"outcome": "not-mergeable", "reason": outcome.reason}


ACTIVITIES = [
    permission,
    branch_head,
    read_pull_request,
    comment,
    build_intended_commit,
    push_branch,
    delete_branch,
    pull_request,
    ready_for_review,
    close_pull,
    check_run,
    merge,
]
