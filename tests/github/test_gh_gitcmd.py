"""The one git runner (app/github/gitcmd.py): bytes as git wrote them, text
with secrets redacted, and a git that hangs killed with its helpers; each
under asyncio's default child watcher and the worker's pidfd watcher
(app/main/children.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.github.gitcmd import GitTimeout, git_env, run_git, run_git_bytes
from tests.child_watchers import child_watcher  # noqa: F401 (a fixture)
from tests.processes import alive
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("child_watcher")


async def test_bytes_come_back_as_git_wrote_them(tmp_path: Path) -> None:
    blob = b"\x00\xff not text\n"
    out = await run_git_bytes(
        ["hash-object", "--stdin", "-w", "--no-filters"],
        cwd=tmp_path,
        env=git_env(extra={"GIT_DIR": str(tmp_path / "x.git")}),
        input=blob,
    )
    assert out.returncode != 0  # no repository yet: an answer, not an exception
    await run_git_bytes(["init", "--quiet", "--bare", "x.git"], cwd=tmp_path, env=git_env())
    env = git_env(extra={"GIT_DIR": str(tmp_path / "x.git")})
    written = await run_git(["hash-object", "--stdin", "-w"], cwd=tmp_path, env=env, input=blob)
    read = await run_git_bytes(["cat-file", "blob", written.stdout.strip()], cwd=tmp_path, env=env)
    assert read.stdout == blob


async def test_text_has_the_secrets_redacted(tmp_path: Path) -> None:
    """What git prints (a helper's error naming the remote with its token, say)
    reaches logs and comments only with the secrets replaced."""
    token = "ghs_0123456789abcdefghij"
    say = f"!echo out {token}; echo err {token} >&2; exit 1"
    result = await run_git(
        ["-c", f"alias.say={say}", "say"], cwd=tmp_path, env=git_env(), secrets=[token]
    )
    assert not result.ok
    assert (result.stdout.strip(), result.stderr.strip()) == ("out ***", "err ***")


async def test_a_git_that_hangs_is_killed_with_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    hang = f"!sh -c 'echo $$ > {pid_file}; exec sleep 60'"
    with pytest.raises(GitTimeout):
        await run_git_bytes(
            ["-c", f"alias.hang={hang}", "hang"], cwd=tmp_path, env=git_env(), time_limit=1.0
        )
    helper = int(pid_file.read_text())
    # Killed at once; gone (reaped, or a zombie: state Z) a moment later.
    await wait_until(f"the helper {helper} to die", lambda: not alive(helper), timeout=10)


async def test_a_cancel_during_the_spawn_kills_the_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that lands while asyncio is still setting git up (its pipes)
    must not leave git's process group behind: asyncio would kill git alone,
    then wait for the pipes its helpers hold open, for as long as they live.
    Here the spawn lingers after git started, so the cancel lands inside it."""
    pid_file = tmp_path / "helper.pid"
    hang = f"!sh -c 'echo $$ > {pid_file}; exec sleep 60'"
    real_spawn = asyncio.create_subprocess_exec
    spawned, finish = asyncio.Event(), asyncio.Event()

    async def lingering_spawn(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await real_spawn(*args, **kwargs)
        spawned.set()
        await finish.wait()
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", lingering_spawn)
    running = asyncio.create_task(
        run_git_bytes(["-c", f"alias.hang={hang}", "hang"], cwd=tmp_path, env=git_env())
    )
    await spawned.wait()
    await wait_until("the helper to start", lambda: pid_file.exists() and pid_file.read_text())
    running.cancel()
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    helper = int(pid_file.read_text())
    await wait_until(f"the helper {helper} to die", lambda: not alive(helper), timeout=10)
