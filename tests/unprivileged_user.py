"""Throwaway users, for tests that run repairbot as a worker that is not root.

The suite runs as root here; the Dockerfile's worker does not. A test
creates a user of its own (``useradd``, which on Debian also gives it a
subordinate uid and gid range in /etc/subuid and /etc/subgid) and starts a
process as that user with ``setpriv`` (no groups, no capability; the bounding
set stays, as in a container without ``--cap-drop``: the setuid
``newuidmap``/``newgidmap`` need CAP_SETUID/CAP_SETGID from it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

#: The checkout a throwaway user's Python imports repairbot from.
ROOT = Path(__file__).resolve().parents[1]


def _reachable_by_others(path: str) -> bool:
    """Every directory on the way may be crossed, and the file run, by any user."""
    real = Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & 0o001:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in real.parents)


def _python_for_others() -> str:
    """This interpreter if another user can run it, else the system's of the same version
    (the test's own may live under a 0700 home, like pyenv's under /root)."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, system):
        if _reachable_by_others(candidate):
            return os.path.realpath(candidate)
    return ""


PYTHON = _python_for_others()
#: Why a test cannot become a throwaway user here, or "".
UNAVAILABLE = (
    ""
    if os.geteuid() == 0 and PYTHON and shutil.which("setpriv") and shutil.which("useradd")
    else "needs root (to become a throwaway user), setpriv, useradd and a Python "
    f"{sys.version_info.major}.{sys.version_info.minor} other users can run"
)


def free_uid() -> int:
    taken = {int(line.split(":")[2]) for line in Path("/etc/passwd").read_text().splitlines()}
    while True:
        uid = 20000 + secrets.randbelow(20000)
        if uid not in taken:
            return uid


@contextlib.contextmanager
def throwaway_user(*, subordinate_ids: bool = True) -> Iterator[int]:
    """A user of its own (uid = gid), with a subordinate range unless told not."""
    uid = free_uid()
    name = f"rbsandbox{uid}"
    no_range = [] if subordinate_ids else ["-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0"]
    subprocess.run(["groupadd", "-g", str(uid), name], check=True)
    useradd = ["useradd", "-M", "-N", "-u", str(uid), "-g", str(uid), *no_range, name]
    subprocess.run(useradd, check=True)
    try:
        yield uid
    finally:
        subprocess.run(["userdel", name], check=True)  # its ranges go with it; fails if in use
        subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)  # if left


def as_user(uid: int) -> list[str]:
    """The argv prefix that runs a program as ``uid`` with no group and no capability."""
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
    ]  # fmt: skip


def python_env(home: Path) -> dict[str, str]:
    """An environment in which ``PYTHON`` imports repairbot and its dependencies."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
    }
