"""Turn a command into what actually gets executed: the sandbox around it.

:func:`prepare` picks the backend (probed once per process), wraps the argv,
hands the writable paths to the sandbox user, and creates the command's
cgroup. It raises :class:`SandboxUnavailable` rather than ever running
repository code unsandboxed by accident.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.sandbox.bwrap import SETPRIV, bwrap_argv, bwrap_path
from app.sandbox.cgroups import CommandCgroup
from app.sandbox.policy import Isolation, SandboxUnavailable

Backend = Literal["bwrap", "none"]
LimitsBy = Literal["cgroup", "rlimit"]


@dataclass(frozen=True, kw_only=True)
class Launch:
    argv: list[str]
    backend: Backend
    limits_by: LimitsBy
    cgroup: CommandCgroup | None
    #: Runs in the child before exec: joins the cgroup, then ``apply_rlimits``.
    preexec: Callable[[], None]

    def cleanup(self) -> None:
        """Kill anything left in the command's cgroup and remove it."""
        if self.cgroup is not None:
            self.cgroup.remove()


def _as_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def _probe_bwrap(bwrap: str, as_root: bool, uid: int, gid: int) -> str | None:
    """``None`` when bwrap builds a sandbox here; otherwise why not."""
    probe = Path("/")
    argv = bwrap_argv(
        bwrap,
        Isolation(uid=uid, gid=gid),
        ["true"],
        cwd=probe,
        writable=[],
        network=False,
        as_root=as_root,
    )
    if as_root and not os.access(SETPRIV, os.X_OK):
        return f"{SETPRIV} (util-linux) is missing: cannot drop privileges inside the sandbox"
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started: {exc}"
    if done.returncode != 0:
        return f"bwrap failed: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def backend_for(isolation: Isolation) -> Backend:
    """The backend commands use under ``isolation``; raises SandboxUnavailable."""
    if isolation.mode == "none":
        return "none"
    if isolation.mode == "unshare":
        raise SandboxUnavailable(
            "REPAIRBOT_SANDBOX=unshare is not supported by this version: use bwrap "
            "(install the `bubblewrap` package) or auto"
        )
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable(
            "no sandbox for repository commands: bubblewrap (`bwrap`) is not installed. "
            "Install the `bubblewrap` package, or set REPAIRBOT_SANDBOX=none on a "
            "trusted single-user setup."
        )
    problem = _probe_bwrap(bwrap, _as_root(), isolation.uid, isolation.gid)
    if problem is not None:
        raise SandboxUnavailable(
            f"no sandbox for repository commands: {problem}. Repository code was not run."
        )
    return "bwrap"


def describe(isolation: Isolation) -> str:
    """One line for logs and the demo: which sandbox commands run in."""
    try:
        backend = backend_for(isolation)
    except SandboxUnavailable as exc:
        return f"unavailable ({exc})"
    if backend == "none":
        return "none (REPAIRBOT_SANDBOX=none: commands run unisolated as the worker)"
    user = f"uid {isolation.uid}" if _as_root() else "a user namespace"
    return f"bubblewrap (own PID, mount and network namespaces; {user})"


def prepare(
    isolation: Isolation,
    argv: Sequence[str],
    *,
    cwd: Path,
    writable: Sequence[Path],
    network: bool,
    memory_bytes: int | None,
    max_tasks: int | None,
    apply_rlimits: Callable[[], None],
) -> Launch:
    """What to execute for ``argv``; the caller must call ``cleanup`` afterwards."""
    backend = backend_for(isolation)
    if backend == "none":
        wrapped = list(argv)
    else:
        as_root = _as_root()
        if as_root:
            for path in writable:
                _hand_over(path, isolation.uid, isolation.gid)
        wrapped = bwrap_argv(
            bwrap_path() or "bwrap",
            isolation,
            argv,
            cwd=cwd,
            writable=writable,
            network=network,
            as_root=as_root,
        )
    cgroup = CommandCgroup.create(memory_bytes=memory_bytes, max_tasks=max_tasks)

    def preexec() -> None:
        if cgroup is not None:
            cgroup.join()
        apply_rlimits()

    return Launch(
        argv=wrapped,
        backend=backend,
        limits_by="cgroup" if cgroup is not None else "rlimit",
        cgroup=cgroup,
        preexec=preexec,
    )


def _hand_over(root: Path, uid: int, gid: int) -> None:
    """Make ``root`` and everything under it the sandbox user's (never following links)."""
    os.lchown(root, uid, gid)
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, gid)
