"""The worker's and web process's child watcher (app/main/children.py): a
subprocess's exit reaches asyncio through a pidfd on the loop that started
it, with no thread; its exit code, a kill and a cancel come through as with
asyncio's default; a child without a pidfd is still reaped; and the real
``run_worker`` and ``run_web`` install it (tests/children_probe.py)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# PidfdWatcher is defined on Python < 3.12 only: named through the module.
from app.main import children
from app.main.children import watch_children_without_threads

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 12) or not children.pidfd_works(),
    reason="Python 3.12 watches children through pidfds itself; or no pidfd_open here",
)


@pytest.fixture
def pidfd_watcher() -> Iterator[children.PidfdWatcher]:
    previous = asyncio.get_child_watcher()
    watcher = children.PidfdWatcher()
    asyncio.set_child_watcher(watcher)
    try:
        yield watcher
    finally:
        asyncio.set_child_watcher(previous)


@pytest.fixture
def threads_started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads started from here on."""
    names: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        names.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return names


async def _exit_code(*argv: str) -> int:
    proc = await asyncio.create_subprocess_exec(*argv)
    return await proc.wait()


async def test_exit_codes_come_through_without_a_thread(
    pidfd_watcher: children.PidfdWatcher, threads_started: list[str]
) -> None:
    assert await _exit_code("sh", "-c", "exit 0") == 0
    assert await _exit_code("sh", "-c", "exit 3") == 3
    assert await _exit_code("sh", "-c", "kill -TERM $$") == -signal.SIGTERM
    out = await asyncio.create_subprocess_exec(
        "sh", "-c", "read line; echo got $line", stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert await out.communicate(b"it\n") == (b"got it\n", None)
    assert out.returncode == 0
    assert threads_started == []


async def test_a_killed_child_is_reaped_after_its_waiter_was_cancelled(
    pidfd_watcher: children.PidfdWatcher,
) -> None:
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    waiting = asyncio.ensure_future(proc.wait())
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    proc.kill()
    assert await proc.wait() == -signal.SIGKILL
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(proc.pid, os.WNOHANG)


async def test_a_child_without_a_pidfd_is_waited_for_on_a_thread(
    pidfd_watcher: children.PidfdWatcher,
    threads_started: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pidfd_open`` can fail once the child runs (out of descriptors): the
    child must still be reaped and its exit reported."""

    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", refused)
    assert await _exit_code("sh", "-c", "exit 5") == 5
    assert len(threads_started) == 1


def test_a_loop_in_another_thread_watches_its_own_children(
    pidfd_watcher: children.PidfdWatcher,
) -> None:
    """Each child is watched by the loop that started it (3.12's design), with
    or without a loop running on the main thread. 3.11's own pidfd watcher
    serves the main thread's loop only: with none running it refuses."""
    answers: list[int] = []

    def other_loop() -> None:
        answers.append(asyncio.run(_exit_code("sh", "-c", "exit 7")))

    alone = threading.Thread(target=other_loop)
    alone.start()
    alone.join(30)

    async def main_loop() -> None:
        beside = threading.Thread(target=other_loop)
        beside.start()
        await asyncio.to_thread(beside.join, 30)

    asyncio.run(main_loop())
    assert answers == [7, 7]


def test_it_is_installed_only_where_pidfd_open_works(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = asyncio.get_child_watcher()

    def refused(pid: int, flags: int = 0) -> int:
        raise PermissionError(errno.EPERM, "refused by a seccomp policy")

    try:
        monkeypatch.setattr(os, "pidfd_open", refused)
        assert watch_children_without_threads() is False
        assert asyncio.get_child_watcher() is previous
        monkeypatch.undo()
        assert watch_children_without_threads() is True
        assert isinstance(asyncio.get_child_watcher(), children.PidfdWatcher)
    finally:
        asyncio.set_child_watcher(previous)


def _probe(role: str, tmp_path: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REPAIRBOT_DATA_DIR": str(tmp_path / "data"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'repairbot.db'}",
        "REDIS_URL": "",
        "REPAIRBOT_SANDBOX": "none",
    }
    done = subprocess.run(
        # As a module from the checkout's root: run as a script, its folder
        # (tests/) would come first on the path, ahead of the checkout.
        [sys.executable, "-m", "tests.children_probe", role, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("role", ["worker", "web"])
def test_the_worker_and_web_processes_watch_children_without_threads(
    role: str, tmp_path: Path
) -> None:
    """``run_worker`` and ``run_web`` as the CLI runs them, in a process of
    their own: git's exit codes, a git that outlives its time limit and a
    cancelled git come through, and no thread waited for any of them."""
    found = _probe(role, tmp_path)
    assert found.pop("checkouts") == [str(ROOT)]
    assert found == {
        "watcher": "PidfdWatcher",
        "version": 0,
        "failed": 128,
        "timed_out": True,
        "cancelled": True,
        "helpers_alive": [],
        "waitpid_threads": [],
    }
