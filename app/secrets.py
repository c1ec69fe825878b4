"""Keeping the worker's secrets out of reach of everything it starts.

A secret in a process's environment is readable by its children (they
inherit it), by anything that can read ``/proc/<pid>/environ``, and ends up
in core dumps. So:

- a process reads its secrets once, at start-up, into
  :class:`~app.config.Settings` (:func:`receive` then ``Settings.from_env``);
- then :func:`lock_down` removes them from ``os.environ`` and marks the
  process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: no core dumps, no
  ptrace by same-uid processes, ``/proc/<pid>/environ`` and ``mem`` owned by
  root);
- a process that starts a worker hands the secrets over through an
  inherited descriptor (:func:`handover`: an anonymous, unlinked memory file
  holding JSON), never through the child's environment or a command line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from collections.abc import Iterable, Mapping, MutableMapping

#: Environment variables that hold secrets (agent API keys are named at run time).
SECRET_NAMES = (
    "GITHUB_PRIVATE_KEY",
    "GITHUB_PRIVATE_KEY_FILE",
    "GITHUB_WEBHOOK_SECRET",
    "DATABASE_URL",
    "REDIS_URL",
)
#: Names the descriptor a parent handed secrets over through.
SECRETS_FD = "REPAIRBOT_SECRETS_FD"
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


class SecretsError(ValueError):
    """The handed-over secrets cannot be read."""


def handover(secrets: Mapping[str, str]) -> tuple[int, dict[str, str]]:
    """A descriptor holding ``secrets`` for a child, and the environment naming it.

    Pass the descriptor in ``pass_fds`` and close it once the child started.
    """
    fd = os.memfd_create("repairbot-secrets", 0)  # no MFD_CLOEXEC: the child inherits it
    try:
        os.write(fd, json.dumps(dict(secrets)).encode())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd, {SECRETS_FD: str(fd)}


def receive(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The secrets a parent handed over (empty when none), read once; the
    descriptor is closed so nothing started later inherits it."""
    raw = environ.pop(SECRETS_FD, "")
    if not raw:
        return {}
    try:
        fd = int(raw)
        with os.fdopen(fd, "rb") as fh:
            data = json.loads(fh.read())
    except (ValueError, OSError) as exc:
        raise SecretsError(f"{SECRETS_FD} does not name readable secrets: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise SecretsError(f"{SECRETS_FD} must hold a JSON object of strings")
    return data


def lock_down(environ: MutableMapping[str, str], names: Iterable[str] = ()) -> bool:
    """Remove secrets from ``environ`` and make this process non-dumpable.

    ``unsetenv`` only drops libc's pointer: the original bytes stay in the
    block the kernel shows as ``/proc/<pid>/environ``, so the values are
    overwritten there too. Returns whether the process is now non-dumpable.
    """
    wanted = {*SECRET_NAMES, SECRETS_FD, *names}
    for name in wanted:
        environ.pop(name, None)
    wipe_initial_environment(wanted)
    return set_non_dumpable()


def wipe_initial_environment(names: Iterable[str]) -> int:
    """Zero the values of ``names`` in the environment block this process was
    started with (``/proc/self/stat`` fields 50-51); returns how many."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[50 - 3]), int(fields[51 - 3])
    except (OSError, IndexError, ValueError):
        return 0
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    prefixes = [f"{name}=".encode() for name in names]
    wiped = offset = 0
    for entry in block.split(b"\0"):
        for prefix in prefixes:
            if entry.startswith(prefix) and len(entry) > len(prefix):
                ctypes.memset(start + offset + len(prefix), 0, len(entry) - len(prefix))
                wiped += 1
        offset += len(entry) + 1
    return wiped


def _libc() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("c")
    return None if path is None else ctypes.CDLL(path, use_errno=True)


def set_non_dumpable() -> bool:
    libc = _libc()
    return libc is not None and libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def is_dumpable() -> bool:
    libc = _libc()
    return libc is None or bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))
