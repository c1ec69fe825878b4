"""Start a ``repairbot`` process as a deployment would: its settings in the
environment, its secrets through an inherited descriptor (never the
environment, where ``/proc/<pid>/environ`` and child processes would see
them). The demo, the several-machines fleet and the crash and chaos tests all
start processes this one way."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from app import secrets
from app.config import Settings

#: The checkout (or installed package root) ``python -m app.main.cli`` runs from.
ROOT = Path(__file__).resolve().parents[2]


def repairbot_env(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: this process's, the settings', ``extra``; no secret."""
    env = {**os.environ, **settings.to_env(), **(extra or {})}
    for name in settings.secret_names():
        env.pop(name, None)
    return env


def spawn_repairbot(
    args: Sequence[str],
    settings: Settings,
    *,
    log: IO[bytes],
    extra_env: Mapping[str, str] | None = None,
    log_level: str = "INFO",
) -> subprocess.Popen[bytes]:
    """``repairbot <args>`` with ``settings``; output to ``log``."""
    env = repairbot_env(settings, extra_env)
    fd, named = secrets.handover(settings.secret_env())
    env.update(named)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "app.main.cli", "--log-level", log_level, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
