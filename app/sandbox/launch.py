"""Turn a command into what actually gets executed: the sandbox around it.

:func:`prepare` picks the backend (probed once per process), wraps the argv,
hands the writable paths to the sandbox user, and creates the command's
cgroup. It raises :class:`SandboxUnavailable` rather than ever running
repository code unsandboxed by accident.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.sandbox import hold, seccomp
from app.sandbox.bwrap import SETPRIV, bwrap_argv, bwrap_path
from app.sandbox.cgroups import CommandCgroup
from app.sandbox.forward import PortForward, wrap
from app.sandbox.hold import HOLD, Rlimit
from app.sandbox.mounts import plan
from app.sandbox.policy import NOBODY, Isolation, SandboxUnavailable
from app.sandbox.userns import Subordinate, UserNamespace, subordinate

Backend = Literal["bwrap", "unshare", "none"]
LimitsBy = Literal["cgroup", "rlimit"]
#: What a probe runs in a fresh sandbox (an absolute path: PATH may be anything).
PROBE = ["/bin/sh", "-c", ":"]
#: Builds the sandbox inside ``unshare`` (standard library only).
ENTER = Path(__file__).with_name("enter.py")


@dataclass(frozen=True, kw_only=True)
class Launch:
    argv: list[str]
    backend: Backend
    limits_by: LimitsBy
    cgroup: CommandCgroup | None
    #: What :meth:`limit` lowers in the held child.
    rlimits: tuple[Rlimit, ...] = ()
    #: An empty directory the ``unshare`` backend mounts the new root on.
    mount_point: Path | None = None
    #: Descriptors the child inherits (bwrap's seccomp program, the user namespace).
    pass_fds: tuple[int, ...] = ()
    #: An unprivileged worker's: the sandbox user is a subordinate uid in it.
    userns: UserNamespace | None = None

    def limit(self, pid: int) -> None:
        """Put the held child (``argv`` starts held: :mod:`app.sandbox.hold`) in
        the command's cgroup and lower its rlimits; OSError when that fails."""
        hold.limit(pid, self.cgroup, self.rlimits)

    def cleanup(self) -> str | None:
        """Kill anything left in the command's cgroup and remove it; hand the
        writable paths back to the worker. ``None``, or why handing back failed."""
        for fd in self.pass_fds:
            if self.userns is None or fd != self.userns.fd:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.mount_point is not None:
            with contextlib.suppress(OSError):
                self.mount_point.rmdir()
        # Last: nothing of the command is alive to change the files meanwhile.
        return self.userns.release() if self.userns is not None else None


def _as_root() -> bool:
    return os.geteuid() == 0


def _sandbox_user() -> Subordinate | None:
    """``None`` for a root worker (it drops to a real user); otherwise the
    worker's subordinate ids, or SandboxUnavailable saying what is missing."""
    if _as_root():
        return None
    ids = subordinate()
    if isinstance(ids, str):
        raise SandboxUnavailable(
            f"no sandbox for repository commands: {ids}. Repository code was not run."
        )
    return ids


def _namespace(ids: Subordinate | None, writable: Sequence[Path]) -> UserNamespace | None:
    return None if ids is None else UserNamespace.create(ids, writable)


@functools.cache
def _probe_bwrap(bwrap: str, ids: Subordinate | None, uid: int, gid: int) -> str | None:
    """``None`` when bwrap builds a sandbox here; otherwise why not."""
    if not os.access(SETPRIV, os.X_OK):
        return f"{SETPRIV} (util-linux) is missing: cannot drop privileges inside the sandbox"
    try:
        userns = _namespace(ids, [])
    except SandboxUnavailable as exc:
        return str(exc)
    fd = seccomp.memfd()
    argv = bwrap_argv(
        bwrap,
        Isolation(uid=uid, gid=gid),
        PROBE,
        cwd=Path("/"),
        writable=[],
        seccomp_fd=fd,
        userns_fd=userns.fd if userns else None,
        # Commands get size-limited tmpfs (the disk quota): bwrap before
        # 0.5 has no --size, and must not pass the probe.
        tmpfs_bytes=1 << 20,
    )
    fds = [fd, userns.fd] if userns else [fd]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False, pass_fds=fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started: {exc}"
    finally:
        os.close(fd)
        if userns is not None:
            userns.release()
    if done.returncode != 0:
        return f"bwrap failed: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def backend_for(isolation: Isolation) -> Backend:
    """The backend commands use under ``isolation``; raises SandboxUnavailable.

    ``auto``: bubblewrap when it works here, else ``unshare``, else refuse.
    A worker that is not root needs subordinate ids for either (see
    :mod:`app.sandbox.userns`).
    """
    if isolation.mode == "none":
        return "none"
    try:
        seccomp.program()
    except seccomp.SeccompUnsupported as exc:
        raise SandboxUnavailable(str(exc)) from None
    ids = _sandbox_user()
    problems = []
    if isolation.mode in ("auto", "bwrap"):
        bwrap = bwrap_path()
        problem = (
            "bubblewrap (`bwrap`) is not installed"
            if bwrap is None
            else _probe_bwrap(bwrap, ids, isolation.uid, isolation.gid)
        )
        if problem is None:
            return "bwrap"
        problems.append(problem)
    if isolation.mode in ("auto", "unshare"):
        unshare = shutil.which("unshare")
        problem = (
            "util-linux `unshare` is not installed"
            if unshare is None
            else _probe_unshare(unshare, ids, isolation.uid, isolation.gid)
        )
        if problem is None:
            return "unshare"
        problems.append(problem)
    raise SandboxUnavailable(
        f"no sandbox for repository commands: {'; '.join(problems)}. Repository code was "
        "not run. Install the `bubblewrap` package, or set REPAIRBOT_SANDBOX=none on a "
        "trusted single-user setup."
    )


@functools.cache
def _probe_unshare(unshare: str, ids: Subordinate | None, uid: int, gid: int) -> str | None:
    """``None`` when util-linux ``unshare`` builds a sandbox here; otherwise why not."""
    mount_point = Path(tempfile.mkdtemp(prefix="repairbot-probe-"))
    userns = None
    try:
        userns = _namespace(ids, [])
        argv = unshare_argv(
            unshare,
            Isolation(uid=uid, gid=gid),
            PROBE,
            cwd=Path("/"),
            writable=[],
            mount_point=mount_point,
            userns_fd=userns.fd if userns else None,
        )
        fds = [userns.fd] if userns else []
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False, pass_fds=fds)
    except SandboxUnavailable as exc:
        return str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not be started: {exc}"
    finally:
        if userns is not None:
            userns.release()
        with contextlib.suppress(OSError):
            mount_point.rmdir()
    if done.returncode != 0:
        return f"unshare failed: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def describe(isolation: Isolation) -> str:
    """One line for logs and the demo: which sandbox commands run in."""
    try:
        backend = backend_for(isolation)
    except SandboxUnavailable as exc:
        return f"unavailable ({exc})"
    if backend == "none":
        return "none (REPAIRBOT_SANDBOX=none: commands run unisolated as the worker)"
    ids = None if _as_root() else subordinate()
    user = (
        f"uid {isolation.uid}"
        if not isinstance(ids, Subordinate)
        else f"uid {NOBODY} of a user namespace, uid {ids.uid} outside"
    )
    name = "bubblewrap" if backend == "bwrap" else "util-linux unshare"
    return f"{name} (own PID, mount and network namespaces; {user})"


def prepare(
    isolation: Isolation,
    argv: Sequence[str],
    *,
    cwd: Path,
    writable: Sequence[Path],
    memory_bytes: int | None,
    max_tasks: int | None,
    rlimits: Sequence[Rlimit],
    forwards: Sequence[PortForward] = (),
    tmpfs_bytes: int | None = None,
) -> Launch:
    """What to execute for ``argv``; the caller must call ``cleanup`` afterwards.

    The command never shares the host's network: ``forwards`` (see
    :mod:`app.sandbox.forward`) are its only ways out.
    """
    backend = backend_for(isolation)
    limits = _Limits(memory_bytes, max_tasks, tuple(rlimits), tmpfs_bytes)
    userns = None
    if backend != "none" and _as_root():
        for path in writable:
            _hand_over(path, isolation.uid, isolation.gid)
    elif backend != "none":
        userns = _namespace(_sandbox_user(), writable)  # hands ``writable`` over
    try:
        return _launch(isolation, backend, argv, cwd, writable, forwards, userns, limits)
    except BaseException:
        if userns is not None:
            userns.release()  # the paths go back to the worker
        raise


@dataclass(frozen=True)
class _Limits:
    memory_bytes: int | None
    max_tasks: int | None
    rlimits: tuple[Rlimit, ...]
    #: The size of the sandbox's own /tmp and /dev/shm (the disk quota).
    tmpfs_bytes: int | None = None


def _launch(
    isolation: Isolation,
    backend: Backend,
    argv: Sequence[str],
    cwd: Path,
    writable: Sequence[Path],
    forwards: Sequence[PortForward],
    userns: UserNamespace | None,
    limits: _Limits,
) -> Launch:
    mount_point = None
    userns_fds = (userns.fd,) if userns is not None else ()
    argv = wrap(argv, forwards, sandboxed=backend != "none")
    sockets = [(f.inside(), f.socket) for f in forwards]
    pass_fds: tuple[int, ...] = userns_fds
    if backend == "none":
        wrapped = list(argv)
    elif backend == "bwrap":
        seccomp_fd = seccomp.memfd()
        pass_fds = (seccomp_fd, *userns_fds)
        wrapped = bwrap_argv(
            bwrap_path() or "bwrap",
            isolation,
            argv,
            cwd=cwd,
            writable=writable,
            seccomp_fd=seccomp_fd,
            userns_fd=userns.fd if userns is not None else None,
            sockets=sockets,
            tmpfs_bytes=limits.tmpfs_bytes,
        )
    else:
        mount_point = Path(tempfile.mkdtemp(prefix="repairbot-root-"))
        wrapped = unshare_argv(
            shutil.which("unshare") or "unshare",
            isolation,
            argv,
            cwd=cwd,
            writable=writable,
            mount_point=mount_point,
            userns_fd=userns.fd if userns is not None else None,
            sockets=sockets,
            tmpfs_bytes=limits.tmpfs_bytes,
        )
    cgroup = CommandCgroup.create(memory_bytes=limits.memory_bytes, max_tasks=limits.max_tasks)
    return Launch(
        argv=[*HOLD, *wrapped],
        backend=backend,
        limits_by="cgroup" if cgroup is not None else "rlimit",
        cgroup=cgroup,
        rlimits=limits.rlimits,
        mount_point=mount_point,
        pass_fds=pass_fds,
        userns=userns,
    )


def unshare_argv(
    unshare: str,
    isolation: Isolation,
    argv: Sequence[str],
    *,
    cwd: Path,
    writable: Sequence[Path],
    mount_point: Path,
    userns_fd: int | None,
    sockets: Sequence[tuple[str, Path]] = (),
    tmpfs_bytes: int | None = None,
) -> list[str]:
    """``[nsenter --user] unshare <namespaces> -- python enter.py <spec>``: the
    fallback backend. ``userns_fd``: an unprivileged worker's user namespace
    (:mod:`app.sandbox.userns`), entered as its root before the rest is made."""
    out = []
    if userns_fd is not None:
        out += ["nsenter", f"--user=/proc/self/fd/{userns_fd}", "--"]
    out += [unshare, "--mount", "--pid", "--fork", "--kill-child", "--ipc", "--uts", "--net"]
    spec = {
        "root": str(mount_point),
        "mounts": plan(isolation, writable, sockets, tmpfs_bytes=tmpfs_bytes),
        "cwd": os.path.realpath(cwd),
        "uid": isolation.uid,
        "gid": isolation.gid,
        "argv": list(argv),
        "seccomp": seccomp.program().hex(),
        "close_fd": userns_fd,
    }
    return [*out, "--", sys.executable, "-I", "-S", str(ENTER), json.dumps(spec)]


def _hand_over(root: Path, uid: int, gid: int) -> None:
    """Make ``root`` and everything under it the sandbox user's (never following links)."""
    os.lchown(root, uid, gid)
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, gid)
