"""All of repairbot's git plumbing: one way to run git, authenticate, and fetch.

Run: argv only, a scrubbed environment, a deadline, secrets redacted. The
environment is built from scratch so neither the operator's git config nor
stray ``GIT_*`` variables change what we build or where we push, and git
never prompts (it would hang a worker).

Authenticate (:func:`remote_auth`, for fetch and push alike): the token
travels in an ``http.<remote url>.extraHeader`` entry of ``GIT_CONFIG_*``
environment variables, so git sends it to that remote only, never to
another host a submodule or a redirect names; it is never in argv (``ps``)
or a URL (logs, ``.git/config``). Credential helpers are switched off (none
may answer, or store the token) and redirects are not followed (a redirect
must not carry the header elsewhere). Any output we keep is redacted.

Fetch (:func:`fetch_commit`): exactly one commit, shallow, into a git
directory of ours.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DEFAULT_TIME_LIMIT = 120.0


@dataclass(frozen=True)
class GitResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class GitTimeout(Exception):
    """git did not finish in time; it was killed (with its helpers)."""

    def __init__(self, argv: Sequence[str], time_limit: float) -> None:
        super().__init__(f"git {' '.join(argv[1:3])} did not finish within {time_limit:g}s")
        self.argv = tuple(argv)


#: Every git directory of ours lives for one activity, so nothing is kept
#: for later: a fetch keeps what it received as one pack (not a file per
#: object, which the workspace's copy for commands and its removal would
#: walk again) and starts no ``git maintenance`` afterwards. Two processes'
#: and a few hundred files' worth of CPU per fetch of a small repository.
_THROWAWAY_REPOSITORY = (("fetch.unpackLimit", "1"), ("maintenance.auto", "false"))


def git_env(
    config: Sequence[tuple[str, str]] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A clean environment for git with ``config`` passed as ``GIT_CONFIG_*`` entries."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "TMPDIR") if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        {
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
        }
    )
    config = [*config, *_THROWAWAY_REPOSITORY]
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    if extra:
        env.update(extra)
    return env


def init_bare(git_dir: Path) -> None:
    """An empty bare repository at ``git_dir``, as ``git init --bare`` (with no
    template and default settings) makes one, without starting git: a run
    builds a dozen of these."""
    for directory in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (git_dir / directory).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/master\n")
    (git_dir / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
    )


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


@dataclass(frozen=True)
class GitOutput:
    """git's answer with its output as bytes (file contents, tree listings):
    what :func:`run_git` decodes. ``stderr`` is text, secrets already redacted."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: str


async def run_git_bytes(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    input: bytes | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    secrets: Sequence[str] = (),
) -> GitOutput:
    """Run ``git <args>`` in ``cwd``: the one way repairbot runs git. Never
    raises for a non-zero exit; raises :class:`GitTimeout` after killing the
    process group when ``time_limit`` passes."""
    argv = ("git", *args)
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Own process group: a timeout kills git-remote-https and friends too.
            start_new_session=True,
        )
    )
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # A cancel inside the spawn would make asyncio kill git alone and then
        # wait for its pipes, which git's helpers (a git-remote-https stuck on
        # the network) hold open for as long as they live: let the spawn end,
        # then kill the whole group.
        with contextlib.suppress(OSError):  # the spawn failed: nothing to kill
            await _kill(await spawn)
        raise
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), time_limit)
    except TimeoutError:
        await _kill(proc)
        raise GitTimeout(argv, time_limit) from None
    except asyncio.CancelledError:
        await _kill(proc)
        raise
    assert proc.returncode is not None
    return GitOutput(argv, proc.returncode, out, redact(err.decode(errors="replace"), secrets))


async def run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    input: bytes | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    secrets: Sequence[str] = (),
) -> GitResult:
    """:func:`run_git_bytes` with its output as text (secrets redacted)."""
    raw = await run_git_bytes(
        args, cwd=cwd, env=env, input=input, time_limit=time_limit, secrets=secrets
    )
    stdout = redact(raw.stdout.decode(errors="replace"), secrets)
    return GitResult(argv=raw.argv, returncode=raw.returncode, stdout=stdout, stderr=raw.stderr)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


@dataclass(frozen=True)
class RemoteAuth:
    """How git talks to one remote: config entries, and the strings to redact."""

    config: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...] = ()


def remote_auth(remote_url: str, token: str | None) -> RemoteAuth:
    """Config that authenticates to ``remote_url`` and nothing else (see the module doc)."""
    config = [
        # No helper may answer for us (or store our token), and a redirect must
        # not carry the header elsewhere.
        ("credential.helper", ""),
        ("http.followRedirects", "false"),
    ]
    if not token:
        return RemoteAuth(tuple(config))
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    config.append((f"http.{remote_url}.extraHeader", f"Authorization: Basic {basic}"))
    return RemoteAuth(tuple(config), (token, basic))


FetchStatus = Literal["fetched", "unreachable", "missing"]


@dataclass(frozen=True)
class FetchOutcome:
    status: FetchStatus
    #: git's explanation (redacted) when not fetched.
    detail: str = ""


async def fetch_commit(
    git_dir: Path,
    remote_url: str,
    sha: str,
    *,
    token: str | None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    config: Sequence[tuple[str, str]] = (),
    whole: bool = False,
) -> FetchOutcome:
    """Fetch ``sha`` from ``remote_url`` into the repository at ``git_dir``.

    Tries a shallow fetch of exactly ``sha`` (``whole``: ``sha`` with its
    whole history, in the same one fetch); when the server refuses that
    (``uploadpack.allowReachableSHA1InWant`` off), fetches the branches and
    looks for the commit among them. ``unreachable``: the remote could not
    be read (network, auth: may work later); ``missing``: it has no such commit.
    """
    auth = remote_auth(remote_url, token)
    env = git_env([*auth.config, *config], extra={"GIT_DIR": str(git_dir)})
    shallow = await run_git(
        ["fetch", "--quiet", "--no-tags", *([] if whole else ["--depth=1"]), remote_url, sha],
        cwd=git_dir,
        env=env,
        time_limit=time_limit,
        secrets=auth.secrets,
    )
    if shallow.ok:
        return FetchOutcome("fetched")
    full = await run_git(
        ["fetch", "--quiet", "--no-tags", remote_url, "+refs/heads/*:refs/remotes/origin/*"],
        cwd=git_dir,
        env=env,
        time_limit=time_limit,
        secrets=auth.secrets,
    )
    if not full.ok:
        return FetchOutcome("unreachable", (full.stderr or shallow.stderr).strip())
    found = await run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=git_dir, env=env)
    if not found.ok:
        return FetchOutcome("missing", f"the repository has no commit {sha}")
    return FetchOutcome("fetched")
