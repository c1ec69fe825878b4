"""``python -m tests.children_probe worker|web TMP``: run ``run_worker`` or
``run_web`` as ``repairbot worker`` / ``repairbot web`` do (``asyncio.run``
on the main thread of a fresh process), with its serving part replaced by a
probe that runs git through the product's runner, and print one JSON line:
the child watcher in use, exit codes, a timeout and a cancel, and the
``waitpid`` threads started (tests/test_children.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from app.config import Settings
from app.github.gitcmd import GitTimeout, git_env, run_git_bytes
from app.main import web_process, worker_process
from app.operations.migrate import upgrade
from tests.processes import alive

for _name in ("activities", "handlers"):
    __import__(_name)

found: dict[str, Any] = {}
#: Top-level packages whose modules the worker and web processes import.
LAYERS = ("app", "activities", "handlers")


async def _until(check: Any) -> None:
    """Wait on recorded state (a file git's helper writes), polled."""
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("the helper never started")


async def probe(tmp: Path) -> None:
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    threading.Thread.start = counted  # type: ignore[method-assign]
    try:
        found["watcher"] = type(asyncio.get_child_watcher()).__name__
        env = git_env()
        found["version"] = (await run_git_bytes(["--version"], cwd=tmp, env=env)).returncode
        failed = await run_git_bytes(["rev-parse", "--verify", "nope"], cwd=tmp, env=env)
        found["failed"] = failed.returncode
        helpers = []
        pid_file = tmp / "timed-out.pid"
        hang = f"!sh -c 'echo $$ > {pid_file}; exec sleep 60'"
        try:
            await run_git_bytes(
                ["-c", f"alias.hang={hang}", "hang"], cwd=tmp, env=env, time_limit=1
            )
        except GitTimeout:
            found["timed_out"] = True
        helpers.append(int(pid_file.read_text()))
        pid_file = tmp / "cancelled.pid"
        hang = f"!sh -c 'echo $$ > {pid_file}; exec sleep 60'"
        running = asyncio.create_task(
            run_git_bytes(["-c", f"alias.hang={hang}", "hang"], cwd=tmp, env=env)
        )
        await _until(lambda: pid_file.exists() and pid_file.read_text())
        running.cancel()
        try:
            await running
        except asyncio.CancelledError:
            found["cancelled"] = True
        helpers.append(int(pid_file.read_text()))
        # Killed with their process group: gone, or zombies of a killed sh.
        for pid in helpers:
            await _until(lambda pid=pid: not alive(pid))
        found["helpers_alive"] = [pid for pid in helpers if alive(pid)]
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]
    found["waitpid_threads"] = [name for name in started if "waitpid" in name]


def main(role: str, tmp: Path) -> int:
    # Which checkout's code this process runs (the venv's editable install
    # names another one).
    found["checkouts"] = sorted(
        {str(Path(sys.modules[name].__file__ or "").resolve().parents[1]) for name in LAYERS}
    )
    settings = Settings.from_env(dict(os.environ))
    upgrade(settings.database_url)

    async def worker_probe(_settings: Settings) -> int:
        await probe(tmp)
        return 0

    async def web_probe(_server: Any, *_args: Any, **_kwargs: Any) -> None:
        await probe(tmp)

    if role == "worker":
        worker_process._run_worker = worker_probe  # type: ignore[assignment]
        code = asyncio.run(worker_process.run_worker(settings))
    else:
        web_process.GracefulServer.serve = web_probe  # type: ignore[method-assign]
        code = asyncio.run(
            web_process.run_web(settings, host="127.0.0.1", port=0, with_worker=False)
        )
    print(json.dumps(found))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
