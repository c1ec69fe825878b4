"""CPU per sandboxed command: a root worker against an unprivileged one.

    python -m bench.sandbox_commands [--commands 20] [--repeat 3]

Runs ``true`` through :func:`app.sandbox.runner.run_command` (the default
sandbox: bubblewrap, the default limits and disk quota) in a driver process,
first as this process's user (root here: the load benchmark's workers) and
then as a throwaway user that is not root, as the Dockerfile runs the worker
(its sandbox user is a subordinate uid of a user namespace per command:
``app/sandbox/userns.py``). The driver measures itself after one warm-up
command (imports, the backend probe): CPU seconds of its own and of every
process it reaped, per command, and the processes it started per command.
The best of ``--repeat`` drivers is reported for each user.

The unprivileged user needs root here (``useradd``, ``setpriv``) and is
made and removed by ``tests/unprivileged_user.py``; without them that row
says why it is missing. Nothing is asserted: tests/bench/ runs it small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.repo_config import Command
from app.sandbox.runner import Sandbox, run_command
from bench.environment import at_start, heading
from tests.unprivileged_user import PYTHON, UNAVAILABLE, as_user, python_env, throwaway_user


@dataclass(frozen=True)
class PerCommand:
    cpu_ms: float
    processes: float
    backend: str


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


async def drive(workspace: Path, commands: int) -> dict[str, Any]:
    """In the driver process: one warm-up command, then ``commands`` measured."""
    started = [0]

    def count(event: str, _: tuple[Any, ...]) -> None:
        if event == "subprocess.Popen":
            started[0] += 1

    sys.addaudithook(count)
    sandbox = Sandbox()

    async def one() -> str:
        run = await run_command(
            Command(shell="true"),
            cwd=workspace,
            home=workspace / ".home",
            tmpdir=workspace / ".tmp",
            time_limit=60,
            sandbox=sandbox,
        )
        if run.result.exit_code != 0:
            raise SystemExit(f"`true` failed in the sandbox: {run.output[-300:]!r}")
        return run.result.sandbox

    await one()
    before, spawned = _cpu_seconds(), started[0]
    for _ in range(commands):
        backend = await one()
    return {
        "cpu_ms": (_cpu_seconds() - before) * 1000 / commands,
        "processes": (started[0] - spawned) / commands,
        "backend": backend,
    }


def _driver(prefix: Sequence[str], workspace: Path, commands: int, **popen: Any) -> PerCommand:
    argv = [*prefix, "-m", "bench.sandbox_commands", "--driver", str(workspace)]
    argv += ["--commands", str(commands)]
    done = subprocess.run(argv, capture_output=True, check=False, **popen)
    if done.returncode != 0:
        raise SystemExit(f"the driver failed: {done.stderr.decode(errors='replace')[-500:]}")
    return PerCommand(**json.loads(done.stdout))


def as_root(commands: int) -> PerCommand:
    with tempfile.TemporaryDirectory(prefix="repairbot-bench-") as home:
        workspace = Path(home) / "ws"
        workspace.mkdir()
        return _driver([sys.executable], workspace, commands)


def as_unprivileged(commands: int) -> PerCommand:
    with throwaway_user() as uid:
        home = Path(tempfile.mkdtemp(prefix="repairbot-bench-unpriv-"))
        try:
            workspace = home / "ws"
            workspace.mkdir()
            for path in (home, workspace):
                os.chown(path, uid, uid)
            home.chmod(0o711)  # bwrap must reach the mounts; nobody lists it
            root = Path(__file__).resolve().parents[1]
            return _driver(
                [*as_user(uid), PYTHON], workspace, commands, cwd=root, env=python_env(home)
            )
        finally:
            shutil.rmtree(home, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_commands", description=__doc__)
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver is not None:
        print(json.dumps(asyncio.run(drive(args.driver, args.commands))))
        return 0
    start = at_start()
    rows: list[tuple[str, PerCommand | str]] = [
        ("root", min((as_root(args.commands) for _ in range(args.repeat)), key=_cpu))
    ]
    if UNAVAILABLE:
        rows.append(("unprivileged (Dockerfile)", UNAVAILABLE))
    else:
        runs = (as_unprivileged(args.commands) for _ in range(args.repeat))
        rows.append(("unprivileged (Dockerfile)", min(runs, key=_cpu)))
    print(heading("bench.sandbox_commands", list(argv or sys.argv[1:]), start))
    print(f"{args.commands} commands per driver, best of {args.repeat}")
    print()
    print("| worker | sandbox | CPU ms per command (driver + reaped) | processes started |")
    print("|---|---|---:|---:|")
    for who, got in rows:
        if isinstance(got, str):
            print(f"| {who} | not measured: {got} | | |")
        else:
            print(f"| {who} | {got.backend} | {got.cpu_ms:.1f} | {got.processes:.1f} |")
    return 0


def _cpu(per: PerCommand) -> float:
    return per.cpu_ms


if __name__ == "__main__":
    raise SystemExit(main())
