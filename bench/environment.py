"""Where and what a benchmark ran on: the machine, its load, the code revision."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def revision() -> str:
    """The commit measured, and whether the engine differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "app/engine"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head}" + (" with local changes in app/engine" if dirty else " (app/engine clean)")


def at_start() -> dict[str, str]:
    """Read before a benchmark runs: other people may commit meanwhile."""
    return {"revision": revision(), "load": load()}


def heading(module: str, argv: Sequence[str], start: dict[str, str]) -> str:
    """The lines every benchmark report opens with (the command, revision,
    machine and load), as docs/benchmarks.md records them."""
    return "\n".join(
        [
            f"command: {shlex.join(['python', '-m', module, *argv])}",
            f"revision: {start['revision']}",
            f"machine: {machine()}",
            f"load average at start / end: {start['load']} / {load()}",
        ]
    )
