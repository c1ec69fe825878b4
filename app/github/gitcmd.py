"""Run ``git`` for repairbot: argv only, a scrubbed environment, a deadline, secrets redacted.

The environment is built from scratch so neither the operator's git config
nor stray ``GIT_*`` variables change what we build or where we push, and git
never prompts (it would hang a worker). Secrets reach git only through
environment variables (``GIT_CONFIG_COUNT``/``KEY``/``VALUE``), never argv,
so ``ps`` and our logs cannot show them; any output we keep is redacted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    if extra:
        env.update(extra)
    return env


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


async def run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    input: bytes | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    secrets: Sequence[str] = (),
) -> GitResult:
    """Run ``git <args>`` in ``cwd``. Never raises for a non-zero exit; raises
    :class:`GitTimeout` after killing the process group when ``time_limit`` passes."""
    argv = ("git", *args)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # Own process group: a timeout kills git-remote-https and friends too.
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), time_limit)
    except TimeoutError:
        await _kill(proc)
        raise GitTimeout(argv, time_limit) from None
    except asyncio.CancelledError:
        await _kill(proc)
        raise
    assert proc.returncode is not None
    return GitResult(
        argv=argv,
        returncode=proc.returncode,
        stdout=redact(out.decode(errors="replace"), secrets),
        stderr=redact(err.decode(errors="replace"), secrets),
    )


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
