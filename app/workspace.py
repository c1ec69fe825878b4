"""Workspaces rebuilt from recorded inputs: repository, base commit, candidate patch.

Every attempt that needs a checkout builds a fresh one under a new, unique
directory and removes it when done; nothing depends on a directory
surviving a crash, and no directory is ever reused (no ``git reset --hard``
between jobs). A workspace directory holds::

    git/      our own git directory: fetched into, read by the worker; never
              visible to repository code
    repo/     the checkout, detached at the base commit (+ the patch); commands' cwd;
              its .git is a copy made for the commands and agents to use
    home/     HOME for commands (so tools' dotfiles stay out of the tree)
    tmp/      TMPDIR for commands
    scratch/  files handed to the agent (issue, logs), outside the repo tree

Why two git directories: repository code runs in ``repo/`` and may rewrite
``repo/.git`` (its config can name programs git runs: ``core.fsmonitor``,
filter drivers, hooks; or point ``core.worktree`` at another directory).
Every git command the worker itself runs here uses ``git/`` (our config,
our index) with ``repo/`` as the work tree, so nothing the commands wrote
can make the worker run a program or read outside the checkout.

Fetching goes through :mod:`app.github.gitcmd`: the token in a header
scoped to the remote URL, no credential helpers, no redirects. Or nothing is
fetched: given a worker's cache entry holding the base (``objects``,
:mod:`app.github.objcache`), ``git/`` borrows its objects
(``objects/info/alternates``), and ``repo/.git`` gets a copy of them: the
copy the commands see never points outside the workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.github.gitcmd import (
    FetchOutcome,
    GitTimeout,
    fetch_commit,
    git_env,
    init_bare,
    remote_auth,
    run_git,
    run_git_bytes,
)
from app.github.objcache import borrow, copy_objects
from app.sandbox import userns

log = logging.getLogger("repairbot.workspace")

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
#: How long a fetch of a workspace's base may take.
FETCH_TIME_LIMIT = _GIT_TIME_LIMIT


class WorkspaceError(Exception):
    """The workspace could not be built as recorded."""


class FetchFailed(WorkspaceError):
    """git could not fetch from the remote (network, auth): may work later."""


class CommitNotFound(WorkspaceError):
    """The remote was reachable but does not have the base commit."""


class PatchRejected(WorkspaceError):
    """The candidate patch does not apply to the base commit."""


class CheckoutRefused(WorkspaceError):
    """The commit's tree is too large to check out, or holds a nested ``.git``:
    read from the tree before anything was written; retrying will not help."""


class DiffTooLarge(WorkspaceError):
    """The checkout's changes make a diff larger than the cap: not a proposal."""


class NestedGitRefused(WorkspaceError):
    """Something in the work tree planted a ``.git`` below its root: the
    worker's git would treat it as another repository and follow it."""


class QuotaExceeded(WorkspaceError):
    """The workspace holds more than its disk quota."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one workspace may hold. A checkout is refused before it is written
    when its tree exceeds the first two; a proposal when its diff exceeds
    ``diff_bytes``; an attempt when the workspace exceeds ``quota_bytes``."""

    checkout_files: int = 100_000
    checkout_bytes: int = 1 << 30
    diff_bytes: int = 8 << 20
    quota_bytes: int = 4 << 30


LIMITS = Limits()


@dataclass(frozen=True)
class Workspace:
    root: Path
    base_sha: str

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def git_dir(self) -> Path:
        """The worker's own git directory for this checkout (see the module doc)."""
        return self.root / "git"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"


#: Pinned for every git command the worker runs in a workspace: settings that
#: would run a program or change what is read, whatever a config says.
_PINNED = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.bare", "false"),
    ("diff.external", ""),
    ("safe.directory", "*"),  # the checkout belongs to the sandbox user
)


def workspace_git_env(ws: Workspace) -> dict[str, str]:
    """The environment every git command the worker runs in ``ws`` uses: our
    git directory, pinned settings, no discovery (see the module doc)."""
    return _git_env(ws)


def _git_env(ws: Workspace | None = None) -> dict[str, str]:
    # Built from scratch (the operator's git config and stray GIT_* variables
    # must not change what we fetch or build); in a workspace, our git directory.
    extra = {}
    if ws is not None:
        extra = {
            "GIT_DIR": str(ws.git_dir),
            "GIT_WORK_TREE": str(ws.repo),
            # Never discover a repository above the workspace (a planted
            # gitfile or a checkout inside someone else's repository).
            "GIT_CEILING_DIRECTORIES": str(ws.root.parent),
        }
    return git_env(_PINNED, extra=extra)


async def _git_ok(args: Sequence[str], *, ws: Workspace, input: bytes | None = None) -> bytes:
    result = await run_git_bytes(
        args, cwd=ws.repo, env=_git_env(ws), input=input, time_limit=_GIT_TIME_LIMIT
    )
    if result.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def raise_unless_fetched(fetched: FetchOutcome) -> None:
    """A failed fetch of a workspace's base as its error: :class:`FetchFailed`
    (the remote could not be read) or :class:`CommitNotFound`."""
    if fetched.status == "unreachable":
        raise FetchFailed(f"git fetch failed: {fetched.detail}")
    if fetched.status == "missing":
        raise CommitNotFound(fetched.detail)


async def build_workspace(
    root: Path,
    *,
    clone_url: str,
    base_sha: str,
    patch: str | None,
    token: str | None = None,
    git_config: Sequence[tuple[str, str]] = (),
    time_limit: float = _GIT_TIME_LIMIT,
    limits: Limits = LIMITS,
    depth: int = 1,
    tags: bool = False,
    objects: Path | None = None,
) -> Workspace:
    """A new workspace under ``root`` at ``base_sha`` with ``patch`` applied (staged).

    ``token`` authenticates to ``clone_url`` only; ``git_config`` adds
    settings for the fetch. ``objects``: a cache entry holding ``base_sha``
    (leased by the caller for the workspace's life) to borrow instead of
    fetching. Raises :class:`FetchFailed`,
    :class:`CommitNotFound`, :class:`CheckoutRefused` (the tree, read before
    it is written, exceeds ``limits`` or holds a nested ``.git``) or
    :class:`PatchRejected`; on any failure the half-built directory is removed.
    """
    if not _SHA.match(base_sha):
        raise ValueError(f"base_sha must be a full commit id, got {base_sha!r}")
    ws = _new_workspace(root, base_sha)
    try:
        init_bare(ws.git_dir)
        if objects is not None:
            borrow(ws.git_dir, objects)
        else:
            fetched = await fetch_commit(
                ws.git_dir,
                clone_url,
                base_sha,
                token=token,
                time_limit=time_limit,
                config=git_config,
            )
            raise_unless_fetched(fetched)
        await check_tree(ws, base_sha, limits)
        if depth != 1 or tags:
            await _deepen(ws, clone_url, base_sha, token, git_config, depth, tags, time_limit)
        # A detached HEAD at the base, as ``update-ref --no-deref`` would write it
        # (the commit is fetched and its tree checked above).
        (ws.git_dir / "HEAD").write_text(f"{base_sha}\n")
        await _git_ok(["read-tree", "--reset", "-u", "HEAD"], ws=ws)
        _configure(ws)
        if patch:
            await apply_patch(ws, patch, index=True)
        await asyncio.to_thread(_give_commands_a_git_dir, ws, objects)
    except BaseException:
        remove_workspace(ws)
        raise
    return ws


async def _deepen(
    ws: Workspace,
    clone_url: str,
    base_sha: str,
    token: str | None,
    git_config: Sequence[tuple[str, str]],
    depth: int,
    tags: bool,
    time_limit: float,
) -> None:
    """More history (``depth`` commits, 0: all) and the tags, for version tools."""
    auth = remote_auth(clone_url, token)
    env = git_env([*auth.config, *git_config], extra={"GIT_DIR": str(ws.git_dir)})
    args = ["fetch", "--quiet", "--tags" if tags else "--no-tags"]
    if (ws.git_dir / "shallow").exists():
        args.append("--unshallow" if depth == 0 else f"--depth={depth}")
    try:
        result = await run_git(
            [*args, clone_url, base_sha],
            cwd=ws.git_dir,
            env=env,
            time_limit=time_limit,
            secrets=auth.secrets,
        )
    except GitTimeout as exc:
        raise FetchFailed(f"git fetch of history and tags timed out: {exc}") from None
    if not result.ok:
        raise FetchFailed(f"git fetch of history and tags failed: {result.stderr.strip()}")


def _new_workspace(root: Path, base_sha: str) -> Workspace:
    # mkdtemp gives a name no other attempt has or will have.
    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace(root=Path(tempfile.mkdtemp(dir=root, prefix="ws-")), base_sha=base_sha)
    for directory in (ws.repo, ws.home, ws.tmp, ws.scratch):
        directory.mkdir()
    return ws


def _configure(ws: Workspace) -> None:
    exclude = ws.git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("\n# repairbot: tool caches are never part of a proposal\n")
        fh.write("\n".join(_LOCAL_EXCLUDES) + "\n")


def _give_commands_a_git_dir(ws: Workspace, objects: Path | None = None) -> None:
    """``repo/.git``: a copy of ours, so agents can use git; ours stays private.

    Only objects, refs, HEAD, index and excludes are copied, never hooks or
    config; the copy gets a config of its own with an identity, so a CLI
    agent that commits does not fail (its commits are harmless: the
    proposal is a diff against the base). Never an alternates file: the
    borrowed cache entry's objects (``objects``) are copied in instead, so
    the copy is self-contained and names no path of the worker's cache.
    """
    theirs = ws.repo / ".git"
    shutil.copytree(
        ws.git_dir, theirs, ignore=shutil.ignore_patterns("hooks", "config", "alternates")
    )
    if objects is not None:
        copy_objects(objects, theirs)
    (theirs / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        "[user]\n\tname = repairbot agent\n\temail = agent@repairbot.invalid\n"
    )


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
    result = await run_git_bytes(
        [*args, "-"],
        cwd=ws.repo,
        env=_git_env(ws),
        input=patch.encode(errors="surrogateescape"),
        time_limit=_GIT_TIME_LIMIT,
    )
    if result.returncode != 0:
        raise PatchRejected(result.stderr.strip() or "git apply failed")


async def snapshot(ws: Workspace) -> str:
    """Stage everything and return the tree id: a point to diff from later.

    Taken after setup commands ran, it keeps what setup created (build
    output, lock files) out of the agent's proposal.
    """
    await _stage_all(ws)
    return (await _git_ok(["write-tree"], ws=ws)).decode().strip()


async def _stage_all(ws: Workspace) -> None:
    # A nested .git would make `git add` record a gitlink and read another
    # repository (a planted gitfile can name any on the host): refuse first.
    await asyncio.to_thread(refuse_nested_git, ws)
    await _git_ok(["add", "--all"], ws=ws)


async def diff_from(ws: Workspace, tree_ish: str, *, limit: int | None = None) -> str:
    """Everything changed in the checkout since ``tree_ish``, as a binary-safe patch.

    git writes the diff to a pipe read in chunks: at most ``limit`` bytes
    (default :data:`LIMITS`) are ever held; past that git is stopped and
    :class:`DiffTooLarge` raised, so a huge file the agent wrote costs the
    worker no more than the cap (it used to cost ~4x the file).
    """
    cap = LIMITS.diff_bytes if limit is None else limit
    await _stage_all(ws)
    args = ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-textconv"]
    out = await _git_capped([*args, tree_ish], ws=ws, limit=cap)
    if out is None:
        raise DiffTooLarge(f"the changes make a diff larger than {cap} bytes")
    # surrogateescape keeps bytes of non-UTF-8 files exact through str.
    return out.decode(errors="surrogateescape")


async def file_at(ws: Workspace, commit: str, path: str, *, limit: int) -> bytes | None:
    """A regular file's bytes at ``commit`` (our git directory), or ``None``
    when it is absent there, is not a regular file, or exceeds ``limit``."""
    listed = await run_git_bytes(
        ["ls-tree", "-z", commit, "--", path],
        cwd=ws.repo,
        env=_git_env(ws),
        time_limit=_GIT_TIME_LIMIT,
    )
    fields = listed.stdout.split(b"\t", 1)[0].split() if listed.returncode == 0 else []
    if len(fields) != 3 or fields[0] not in (b"100644", b"100755"):
        return None
    return await _git_capped(["cat-file", "blob", fields[2].decode()], ws=ws, limit=limit)


async def _git_capped(args: Sequence[str], *, ws: Workspace, limit: int) -> bytes | None:
    """git's stdout, or ``None`` when it exceeds ``limit`` bytes (git is killed)."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=ws.repo,
        env=_git_env(ws),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    chunks = bytearray()
    try:
        async with asyncio.timeout(_GIT_TIME_LIMIT):
            while chunk := await proc.stdout.read(1 << 16):
                chunks += chunk
                if len(chunks) > limit:
                    return None
            err = await proc.stderr.read(1 << 16)
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Drain to EOF: the pipes close with the process, not at garbage collection.
            await asyncio.shield(proc.communicate())
    if code != 0:
        raise WorkspaceError(f"git {args[0]} failed: {err.decode(errors='replace').strip()}")
    return bytes(chunks)


def refuse_nested_git(ws: Workspace) -> None:
    """Raise :class:`NestedGitRefused` when any ``.git`` (file, directory or
    link, any case) exists in the work tree below its root. The root's own
    ``.git`` is the agents' copy and never read by the worker's git."""
    root = str(ws.repo)
    for directory, dirs, files in os.walk(root, followlinks=False):
        top = directory == root
        for name in (*dirs, *files):
            if name.lower() == ".git" and not (top and name == ".git"):
                rel = os.path.relpath(os.path.join(directory, name), root)
                raise NestedGitRefused(f"{rel}: a nested .git is not allowed in the work tree")
        if top:
            dirs[:] = [d for d in dirs if d != ".git"]


def workspace_usage(ws: Workspace, *, limit: int) -> int:
    """Bytes the workspace holds (blocks actually used, links not followed);
    stops counting and raises :class:`QuotaExceeded` past ``limit``."""
    used = 0
    for directory, dirs, files in os.walk(ws.root, followlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                used += os.lstat(os.path.join(directory, name)).st_blocks * 512
        if used > limit:
            raise QuotaExceeded(f"the workspace exceeded its {limit // (1 << 20)} MiB disk quota")
    return used


async def check_tree(ws: Workspace, commit: str, limits: Limits = LIMITS) -> None:
    """Refuse ``commit`` before anything is written when its tree has more than
    ``limits.checkout_files`` entries or ``limits.checkout_bytes`` of blobs,
    or a ``.git`` path component. Read from ``git ls-tree -r -l`` as it
    streams: a "git bomb" (a small tree naming the same subtree thousands of
    times over) is stopped at the cap, never listed whole."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        "ls-tree",
        "-r",
        "-l",
        "-z",
        "--full-tree",
        commit,
        cwd=ws.root,
        env=_git_env(ws),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None
    files = total = 0
    try:
        async with asyncio.timeout(_GIT_TIME_LIMIT):
            pending = b""
            while chunk := await proc.stdout.read(1 << 16):
                *entries, pending = (pending + chunk).split(b"\0")
                for entry in entries:
                    info, _, path = entry.partition(b"\t")
                    fields = info.split()
                    files += 1
                    if len(fields) == 4 and fields[3].isdigit():
                        total += int(fields[3])
                    if any(part.lower() == b".git" for part in path.split(b"/")):
                        raise CheckoutRefused(
                            f"{path.decode(errors='replace')}: the tree holds a .git path"
                        )
                    if files > limits.checkout_files:
                        raise CheckoutRefused(
                            f"the tree has more than {limits.checkout_files} files"
                        )
                    if total > limits.checkout_bytes:
                        raise CheckoutRefused(
                            f"the tree holds more than {limits.checkout_bytes} bytes"
                        )
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Drain to EOF: the pipes close with the process, not at garbage collection.
            await asyncio.shield(proc.communicate())
    if code != 0:
        raise WorkspaceError(f"git ls-tree {commit} failed")


async def diff_against_base(ws: Workspace) -> str:
    """The proposal: every change in the checkout relative to the base commit."""
    return await diff_from(ws, ws.base_sha)


async def changed_paths(ws: Workspace, tree_ish: str) -> list[str]:
    """Paths staged differently from ``tree_ish`` (call after :func:`diff_from`)."""
    out = await _git_ok(["diff", "--cached", "--name-only", "-z", tree_ish], ws=ws)
    return [p for p in out.decode(errors="surrogateescape").split("\0") if p]


async def tracked_regular_files(ws: Workspace) -> list[str]:
    """Tracked paths that are regular files (mode 100644/100755): no symlinks
    (mode 120000, which could point anywhere) and no submodules."""
    out = await _git_ok(["ls-files", "--stage", "-z"], ws=ws)
    paths = []
    for entry in out.decode(errors="surrogateescape").split("\0"):
        info, _, path = entry.partition("\t")
        if path and info.split(" ", 1)[0] in ("100644", "100755"):
            paths.append(path)
    return paths


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
    if root.exists():
        # An unprivileged worker killed during a command never handed the
        # workspace back: files of the sandbox user's (a subordinate uid).
        problem = userns.reclaim([root])
        if problem is not None:
            log.warning("workspace %s not removed: %s", root.name, problem)
            return
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
