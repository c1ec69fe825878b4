"""Workspaces rebuilt from recorded inputs: repository, base commit, candidate patch.

Every attempt that needs a checkout builds a fresh one under a new, unique
directory and removes it when done; nothing depends on a directory
surviving a crash, and no directory is ever reused (no ``git reset --hard``
between jobs). A workspace directory holds::

    repo/     the checkout, detached at the base commit (+ the patch); commands' cwd
    home/     HOME for commands (so tools' dotfiles stay out of the tree)
    tmp/      TMPDIR for commands
    scratch/  files handed to the agent (issue, logs), outside the repo tree

Credentials reach git only through the environment (``GIT_CONFIG_COUNT`` /
``GIT_CONFIG_KEY_n`` / ``GIT_CONFIG_VALUE_n`` setting ``http.extraHeader``),
never through the URL or argv, where ``ps`` and logs would show them; git
never prompts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.github.gitcmd import git_env

#: Tool caches that a command run in the tree leaves behind; never part of a proposal.
_LOCAL_EXCLUDES = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
)
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_GIT_TIME_LIMIT = 600.0


class WorkspaceError(Exception):
    """The workspace could not be built as recorded."""


class FetchFailed(WorkspaceError):
    """git could not fetch from the remote (network, auth): may work later."""


class CommitNotFound(WorkspaceError):
    """The remote was reachable but does not have the base commit."""


class PatchRejected(WorkspaceError):
    """The candidate patch does not apply to the base commit."""


@dataclass(frozen=True)
class Workspace:
    root: Path
    base_sha: str

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"


def token_auth_env(token: str) -> dict[str, str]:
    """Environment that makes git send ``token`` (GitHub's installation-token form)."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


def _git_env(auth_env: Mapping[str, str] | None = None) -> dict[str, str]:
    # Built from scratch (the operator's git config and stray GIT_* variables
    # must not change what we fetch or build); credentials only via environment.
    return git_env(extra=auth_env)


def _secrets_of(auth_env: Mapping[str, str]) -> list[str]:
    values = [v for k, v in auth_env.items() if k.startswith("GIT_CONFIG_VALUE_")]
    return values + [v.rsplit(" ", 1)[-1] for v in values if " " in v]


@dataclass(frozen=True)
class _GitOutput:
    returncode: int
    stdout: bytes
    stderr: str


async def _git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    input: bytes | None = None,
    time_limit: float = _GIT_TIME_LIMIT,
    secrets: Sequence[str] = (),
) -> _GitOutput:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # a timeout kills git-remote-http and friends too
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), time_limit)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.shield(proc.wait())
        raise
    text = err.decode(errors="replace")
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    assert proc.returncode is not None
    return _GitOutput(proc.returncode, out, text.strip())


async def _git_ok(args: Sequence[str], *, cwd: Path, input: bytes | None = None) -> bytes:
    result = await _git(args, cwd=cwd, env=_git_env(), input=input)
    if result.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {result.stderr}")
    return result.stdout


async def build_workspace(
    root: Path,
    *,
    clone_url: str,
    base_sha: str,
    patch: str | None,
    auth_env: Mapping[str, str],
    time_limit: float = _GIT_TIME_LIMIT,
) -> Workspace:
    """A new workspace under ``root`` at ``base_sha`` with ``patch`` applied (staged).

    Tries a shallow fetch of exactly ``base_sha``; when the server refuses
    that, fetches the branches and looks for the commit among them. Raises
    :class:`FetchFailed`, :class:`CommitNotFound` or :class:`PatchRejected`;
    on any failure the half-built directory is removed.
    """
    if not _SHA.match(base_sha):
        raise ValueError(f"base_sha must be a full commit id, got {base_sha!r}")
    ws = _new_workspace(root, base_sha)
    try:
        await _git_ok(["-c", "init.defaultBranch=repairbot", "init", "--quiet"], cwd=ws.repo)
        await _fetch(ws, clone_url, auth_env, time_limit)
        await _git_ok(
            ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", base_sha],
            cwd=ws.repo,
        )
        _configure(ws)
        if patch:
            await apply_patch(ws, patch, index=True)
    except BaseException:
        remove_workspace(ws)
        raise
    return ws


def _new_workspace(root: Path, base_sha: str) -> Workspace:
    # mkdtemp gives a name no other attempt has or will have.
    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace(root=Path(tempfile.mkdtemp(dir=root, prefix="ws-")), base_sha=base_sha)
    for directory in (ws.repo, ws.home, ws.tmp, ws.scratch):
        directory.mkdir()
    return ws


async def _fetch(
    ws: Workspace, clone_url: str, auth_env: Mapping[str, str], time_limit: float
) -> None:
    env = _git_env(auth_env)
    secrets = _secrets_of(auth_env)
    shallow = await _git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", clone_url, ws.base_sha],
        cwd=ws.repo,
        env=env,
        time_limit=time_limit,
        secrets=secrets,
    )
    if shallow.returncode == 0:
        return
    # Servers that refuse a fetch by commit id (uploadpack.allowReachableSHA1InWant
    # off) still serve their branches; the commit may be among them.
    full = await _git(
        ["fetch", "--quiet", "--no-tags", clone_url, "+refs/heads/*:refs/remotes/origin/*"],
        cwd=ws.repo,
        env=env,
        time_limit=time_limit,
        secrets=secrets,
    )
    if full.returncode != 0:
        raise FetchFailed(f"git fetch failed: {full.stderr or shallow.stderr}")
    found = await _git(["cat-file", "-e", f"{ws.base_sha}^{{commit}}"], cwd=ws.repo, env=_git_env())
    if found.returncode != 0:
        raise CommitNotFound(f"the repository has no commit {ws.base_sha}")


def _configure(ws: Workspace) -> None:
    git_dir = ws.repo / ".git"
    # An identity, so a CLI agent that commits does not fail; its commits are
    # harmless because the proposal is a diff against the base commit.
    # Written directly: two fewer git processes per workspace.
    with (git_dir / "config").open("a") as fh:
        fh.write("[user]\n\tname = repairbot agent\n\temail = agent@repairbot.invalid\n")
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("\n# repairbot: tool caches are never part of a proposal\n")
        fh.write("\n".join(_LOCAL_EXCLUDES) + "\n")


async def apply_patch(
    ws: Workspace, patch: str, *, index: bool = False, check: bool = False
) -> None:
    """Apply ``patch`` to the checkout (``index``: stage it too; ``check``: only test).

    Raises :class:`PatchRejected` with git's explanation when it does not apply.
    ``--recount`` forgives wrong hunk line counts, a common flaw of written diffs.
    """
    args = ["apply", "--recount", "--whitespace=nowarn"]
    if index:
        args.append("--index")
    if check:
        args.append("--check")
    if not patch.endswith("\n"):
        patch += "\n"
    result = await _git(
        [*args, "-"], cwd=ws.repo, env=_git_env(), input=patch.encode(errors="surrogateescape")
    )
    if result.returncode != 0:
        raise PatchRejected(result.stderr or "git apply failed")


async def snapshot(ws: Workspace) -> str:
    """Stage everything and return the tree id: a point to diff from later.

    Taken after setup commands ran, it keeps what setup created (build
    output, lock files) out of the agent's proposal.
    """
    await _git_ok(["add", "--all"], cwd=ws.repo)
    return (await _git_ok(["write-tree"], cwd=ws.repo)).decode().strip()


async def diff_from(ws: Workspace, tree_ish: str) -> str:
    """Everything changed in the checkout since ``tree_ish``, as a binary-safe patch."""
    await _git_ok(["add", "--all"], cwd=ws.repo)
    out = await _git_ok(
        ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", tree_ish],
        cwd=ws.repo,
    )
    # surrogateescape keeps bytes of non-UTF-8 files exact through str.
    return out.decode(errors="surrogateescape")


async def diff_against_base(ws: Workspace) -> str:
    """The proposal: every change in the checkout relative to the base commit."""
    return await diff_from(ws, ws.base_sha)


async def changed_paths(ws: Workspace, tree_ish: str) -> list[str]:
    """Paths staged differently from ``tree_ish`` (call after :func:`diff_from`)."""
    out = await _git_ok(["diff", "--cached", "--name-only", "-z", tree_ish], cwd=ws.repo)
    return [p for p in out.decode(errors="surrogateescape").split("\0") if p]


async def tracked_files(ws: Workspace) -> list[str]:
    """The paths git tracks in the checkout."""
    out = await _git_ok(["ls-files", "-z"], cwd=ws.repo)
    return [p for p in out.decode(errors="surrogateescape").split("\0") if p]


def remove_workspace(ws: Workspace | Path) -> None:
    """Remove a workspace whatever state a command left it in (read-only
    directories included); a workspace that is already gone is fine."""
    root = ws.root if isinstance(ws, Workspace) else Path(ws)
    if not root.exists():
        return
    for directory, _, _ in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)
    shutil.rmtree(root, ignore_errors=True)


def sweep_workspaces(root: Path, *, older_than: float, now: float | None = None) -> list[Path]:
    """Remove workspaces under ``root`` not touched for ``older_than`` seconds.

    Workspaces are removed by the activity that built them; this clears the
    ones a crashed worker left behind. Safe to run any time on any worker:
    a live workspace is younger than its activity's start-to-close timeout,
    so pass at least that.
    """
    now = time.time() if now is None else now
    removed = []
    for path in root.glob("ws-*") if root.is_dir() else ():
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            continue
        if age > older_than:
            remove_workspace(path)
            removed.append(path)
    return removed


@contextlib.asynccontextmanager
async def fresh_workspace(
    root: Path,
    *,
    clone_url: str,
    base_sha: str,
    patch: str | None,
    auth_env: Mapping[str, str],
) -> AsyncIterator[Workspace]:
    """Build a workspace, yield it, and remove it however the block ends."""
    ws = await build_workspace(
        root, clone_url=clone_url, base_sha=base_sha, patch=patch, auth_env=auth_env
    )
    try:
        yield ws
    finally:
        await asyncio.to_thread(remove_workspace, ws)
