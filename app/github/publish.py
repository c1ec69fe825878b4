"""Conditional branch publication: build the intended commit, then push it at most once.

The commit is built deterministically (fixed author, committer and dates from
the run), so its sha can be recorded in history *before* anything leaves the
machine, and a rebuilt workspace yields the same sha. Publication is
``git push --atomic --force-with-lease=<ref>:<expected>``: it succeeds only if
the remote ref is still where we last saw it (absent, for a new branch).

When the push ends without a clear answer (connection cut, timeout, fatal
error) the remote is asked where the ref is (``git ls-remote``):

- at the intended commit: done (``already-there``);
- absent, or still at ``expected``: the push provably did not happen, so it
  is sent again (it is conditional, so a late duplicate cannot do harm);
- anywhere else: somebody else moved it; :class:`BranchDiverged` stops the
  run for a human.

The installation token reaches git in an ``http.<url>.extraHeader`` entry of
``GIT_CONFIG_*`` environment variables: never in the URL, never in argv, and
only sent to that remote.

Git never runs inside the workspace for network operations: repository
commands and the agent ran there and could have planted configuration
(``url.*.insteadOf``, ``http.proxy``, hooks) to redirect the push or capture
the token. The push runs from an empty bare repository of ours that borrows
the workspace's objects (``objects/info/alternates``); objects are checked by
the receiving side, configuration is not borrowed.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from app.engine import AmbiguousError, PermanentError, TransientError
from app.github.gitcmd import (
    DEFAULT_TIME_LIMIT,
    GitResult,
    GitTimeout,
    git_env,
    init_bare,
    remote_auth,
    run_git,
)

_SHA = re.compile(r"[0-9a-f]{40}")
#: Pushes sent for one publication before giving up on an unresponsive remote.
DEFAULT_MAX_PUSHES = 3


@dataclass(frozen=True)
class Identity:
    name: str
    email: str


@dataclass(frozen=True)
class Patch:
    """A diff (``git diff --binary`` output) applied to the base commit's tree."""

    diff: bytes


@dataclass(frozen=True)
class Tree:
    """A tree object already in the repository, used as the commit's tree as is."""

    sha: str


Change = Patch | Tree


class PushStatus(enum.StrEnum):
    PUSHED = "pushed"
    ALREADY_THERE = "already-there"
    LEASE_REFUSED = "lease-refused"


@dataclass(frozen=True)
class PushOutcome:
    status: PushStatus
    ref: str
    #: The commit we meant to publish.
    sha: str
    #: Where the remote ref was last seen (``None`` = absent); for LEASE_REFUSED,
    #: where somebody else put it.
    remote_sha: str | None
    #: Pushes sent (more than one after an unclear failure).
    attempts: int = 1


class CommitBuildError(PermanentError):
    """The intended commit cannot be built (unknown base, patch does not apply)."""


class BranchDiverged(PermanentError):
    """After an unclear push the ref is neither ours nor where we expected: needs a human."""

    def __init__(self, ref: str, *, expected: str | None, actual: str, intended: str) -> None:
        super().__init__(
            f"{ref} is at {actual}; expected {expected or 'no branch'} or our commit "
            f"{intended}: somebody else moved it, a human must decide"
        )
        self.ref = ref
        self.expected = expected
        self.actual = actual
        self.intended = intended


def qualify_branch(ref: str) -> str:
    """``refs/heads/<branch>`` for a bare branch name (a push of a sha needs a full ref)."""
    return ref if ref.startswith("refs/") else f"refs/heads/{ref}"


def git_date(timestamp: datetime) -> str:
    """Git's raw date (``<epoch> <+hhmm>``) for an aware datetime, to the second."""
    offset = timestamp.utcoffset()
    if offset is None:
        raise ValueError("commit timestamps must be timezone-aware")
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{int(timestamp.timestamp())} {sign}{hours:02d}{mins:02d}"


async def _git_ok(
    args: list[str],
    repo_dir: Path,
    env: dict[str, str],
    *,
    input: bytes | None = None,
    what: str = "",
) -> str:
    result = await run_git(args, cwd=repo_dir, env=env, input=input)
    if not result.ok:
        reason = result.stderr.strip()[:500] or f"exit status {result.returncode}"
        raise CommitBuildError(f"{what or 'git ' + args[0]} failed: {reason}")
    return result.stdout.strip()


@dataclass(frozen=True)
class Built:
    """A commit :func:`write_commit` made: its sha and its tree's (the tree
    is what the commit's sha names, so whoever knows the one knows the other)."""

    sha: str
    tree: str


async def write_commit(
    repo_dir: Path,
    base_sha: str,
    change: Change,
    message: str,
    identity: Identity,
    timestamp: datetime,
    *,
    committer: Identity | None = None,
) -> Built:
    """Write the commit (``base_sha`` + ``change``) into ``repo_dir``; its sha and tree.

    Same inputs, same sha: identity and dates come from the caller, the
    message is normalized to end in one newline, signing and encoding
    settings are pinned, and the workspace's own index and files are untouched
    (a private index file is used), so this works in a bare repository too.
    """
    committer = committer or identity
    date = git_date(timestamp)
    env = git_env(
        # Pinned over whatever the workspace's own config says (code ran there):
        # settings that change the sha, and ones that would run a program.
        config=[
            ("commit.gpgSign", "false"),
            ("i18n.commitEncoding", "UTF-8"),
            ("core.fsmonitor", "false"),
            ("core.hooksPath", os.devnull),
        ],
        extra={
            "GIT_AUTHOR_NAME": identity.name,
            "GIT_AUTHOR_EMAIL": identity.email,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": date,
        },
    )
    base = await _git_ok(
        ["rev-parse", "--verify", "--quiet", f"{base_sha}^{{commit}}"],
        repo_dir,
        env,
        what=f"finding base commit {base_sha}",
    )
    if isinstance(change, Tree):
        tree = await _git_ok(
            ["rev-parse", "--verify", "--quiet", f"{change.sha}^{{tree}}"],
            repo_dir,
            env,
            what=f"finding tree {change.sha}",
        )
    else:
        with tempfile.TemporaryDirectory(prefix="repairbot-index-") as scratch:
            index_env = {**env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            await _git_ok(["read-tree", base], repo_dir, index_env)
            await _git_ok(
                ["apply", "--cached", "--binary", "--whitespace=nowarn", "-"],
                repo_dir,
                index_env,
                input=change.diff,
                what="applying the patch to the base tree",
            )
            tree = await _git_ok(["write-tree"], repo_dir, index_env)
    text = message.strip("\n") + "\n"
    sha = await _git_ok(
        ["commit-tree", "--no-gpg-sign", tree, "-p", base, "-F", "-"],
        repo_dir,
        env,
        input=text.encode(),
    )
    return Built(sha, tree)


def git_auth_config(remote_url: str, token: str | None) -> list[tuple[str, str]]:
    """git config entries that authenticate to ``remote_url`` and nothing else."""
    return list(remote_auth(remote_url, token).config)


def _auth_config(remote_url: str, token: str | None) -> list[tuple[str, str]]:
    return git_auth_config(remote_url, token)


def _secrets(token: str | None) -> list[str]:
    return list(remote_auth("", token).secrets)


async def remote_ref(
    remote_url: str,
    ref: str,
    *,
    token: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> str | None:
    """Where ``ref`` is on the remote (``None`` = absent). Raises AmbiguousError if the
    remote cannot be asked, since we then do not know what our push did."""
    ref = qualify_branch(ref)
    env = git_env(_auth_config(remote_url, token))
    try:
        async with _clean_room(None) as outside:  # ls-remote needs no repository
            result = await run_git(
                ["ls-remote", remote_url, ref],
                cwd=outside,
                env=env,
                time_limit=time_limit,
                secrets=_secrets(token),
            )
    except GitTimeout as exc:
        raise AmbiguousError(f"cannot read {ref} back from the remote: {exc}") from None
    if not result.ok:
        raise AmbiguousError(
            f"cannot read {ref} back from the remote: {result.stderr.strip()[:500]}"
        )
    for line in result.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref and _SHA.fullmatch(sha):
            return sha
    return None


async def remote_answers(
    remote_url: str, *, token: str | None = None, time_limit: float = DEFAULT_TIME_LIMIT
) -> bool:
    """Whether git can read the remote now (a new fork is not readable at first)."""
    env = git_env(_auth_config(remote_url, token))
    try:
        async with _clean_room(None) as outside:
            result = await run_git(
                ["ls-remote", "--heads", remote_url],
                cwd=outside,
                env=env,
                time_limit=time_limit,
                secrets=_secrets(token),
            )
    except GitTimeout:
        return False
    return result.ok


def _objects_dir(repo_dir: Path) -> Path:
    for candidate in (repo_dir / ".git" / "objects", repo_dir / "objects"):
        if candidate.is_dir():
            return candidate.resolve()
    raise PermanentError(f"{repo_dir} is not a git repository with an object store")


@contextlib.asynccontextmanager
async def _clean_room(repo_dir: Path | None) -> AsyncIterator[Path]:
    """An empty bare repository with our (empty) config, borrowing ``repo_dir``'s objects."""
    with tempfile.TemporaryDirectory(prefix="repairbot-push-") as scratch:
        room = Path(scratch)
        if repo_dir is not None:
            objects = _objects_dir(repo_dir)
            init_bare(room)
            (room / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        yield room


class PushVerdict(enum.Enum):
    OK = "ok"
    UP_TO_DATE = "up-to-date"
    LEASE = "lease"  # refused by our own condition: a definite "not done"
    REMOTE_REJECTED = "remote-rejected"  # the server said no (hook, protection, lock)
    UNCLEAR = "unclear"  # no per-ref verdict: it may or may not have happened


def _verdict(result: GitResult, ref: str) -> tuple[PushVerdict, str]:
    """Read git's porcelain status line for ``ref`` (see ``print_one_push_status`` in git)."""
    for line in result.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[1].endswith(f":{ref}"):
            continue
        flag, summary = parts[0], parts[2]
        if flag in (" ", "+", "*", "-"):  # updated, forced, created, deleted
            return PushVerdict.OK, summary
        if flag == "=":
            return PushVerdict.UP_TO_DATE, summary
        if summary.startswith("[rejected]"):
            # Refused on our side before sending: stale info, already exists, ...
            return PushVerdict.LEASE, summary
        if summary.startswith("[remote rejected]"):
            return PushVerdict.REMOTE_REJECTED, summary
        # "[remote failure] (remote failed to report status)" and anything new.
        return PushVerdict.UNCLEAR, summary
    return PushVerdict.UNCLEAR, result.stderr.strip()[-500:]


async def push(
    argv: Sequence[str],
    ref: str,
    *,
    cwd: Path,
    env: dict[str, str],
    token: str | None,
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> tuple[PushVerdict, str]:
    """Run ``git push --porcelain`` (``argv``) and judge it for ``ref``: a push
    that timed out may or may not have happened (``UNCLEAR``)."""
    try:
        result = await run_git(
            argv, cwd=cwd, env=env, time_limit=time_limit, secrets=_secrets(token)
        )
    except GitTimeout as exc:
        return PushVerdict.UNCLEAR, str(exc)
    return _verdict(result, ref)


async def publish_branch(
    repo_dir: Path,
    remote_url: str,
    ref: str,
    sha: str,
    *,
    expected: str | None,
    token: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    max_pushes: int = DEFAULT_MAX_PUSHES,
) -> PushOutcome:
    """Make ``ref`` on ``remote_url`` point at ``sha`` if it is at ``expected`` now.

    ``expected`` is the remote sha we last recorded; ``None`` or ``""`` means the
    branch must not exist yet. ``repo_dir`` holds ``sha`` and its history.
    """
    ref = qualify_branch(ref)
    expected = expected or None
    env = git_env(_auth_config(remote_url, token))
    argv = [
        "push",
        "--atomic",
        "--porcelain",
        "--no-verify",
        f"--force-with-lease={ref}:{expected or ''}",
        remote_url,
        f"{sha}:{ref}",
    ]
    async with _clean_room(repo_dir) as room:
        return await _push_until_settled(
            room, remote_url, ref, sha, expected, argv, env, token, time_limit, max_pushes
        )


async def _push_until_settled(
    room: Path,
    remote_url: str,
    ref: str,
    sha: str,
    expected: str | None,
    argv: list[str],
    env: dict[str, str],
    token: str | None,
    time_limit: float,
    max_pushes: int,
) -> PushOutcome:
    detail = ""
    for attempt in range(1, max_pushes + 1):
        verdict, detail = await push(
            argv, ref, cwd=room, env=env, token=token, time_limit=time_limit
        )
        if verdict is PushVerdict.OK:
            return PushOutcome(PushStatus.PUSHED, ref, sha, sha, attempt)
        if verdict is PushVerdict.UP_TO_DATE:
            return PushOutcome(PushStatus.ALREADY_THERE, ref, sha, sha, attempt)

        actual = await remote_ref(remote_url, ref, token=token, time_limit=time_limit)
        if actual == sha:
            # Our earlier (or a racing twin's) push of the same commit landed.
            return PushOutcome(PushStatus.ALREADY_THERE, ref, sha, sha, attempt)
        if actual != expected:
            if verdict is PushVerdict.UNCLEAR:
                raise BranchDiverged(
                    ref, expected=expected, actual=actual or "(absent)", intended=sha
                )
            return PushOutcome(PushStatus.LEASE_REFUSED, ref, sha, actual, attempt)
        if verdict is PushVerdict.REMOTE_REJECTED:
            raise PermanentError(f"the remote refused to update {ref}: {detail}")
        # Still at expected: nothing happened, and the push is conditional: send it again.
    raise TransientError(
        f"{ref} still at {expected or 'no branch'} after {max_pushes} pushes: {detail}"
    )
