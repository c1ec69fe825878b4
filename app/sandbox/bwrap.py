"""The bubblewrap backend: argv for ``bwrap`` that builds the sandbox.

Namespaces: PID (the command's tree dies with it: bwrap's init is PID 1 and
``--die-with-parent`` ties it to us), mount (a new root holding only what
:class:`~app.sandbox.policy.Isolation` lists), network (only a loopback of
its own, unless the step may use the network), IPC and UTS. A private
``/proc`` and ``/tmp``, a minimal ``/dev``.

User: a root worker keeps no privilege inside. bwrap runs as root to build
the mounts, then ``setpriv`` drops to the sandbox uid/gid with no groups, no
capabilities (bounding set included) and ``no_new_privs``, so setuid
programs cannot climb back. An unprivileged worker uses a user namespace
instead (it has nothing to drop).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from app.sandbox.policy import SYSTEM_PATHS, Isolation

SETPRIV = "/usr/bin/setpriv"


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def bwrap_argv(
    bwrap: str,
    isolation: Isolation,
    argv: Sequence[str],
    *,
    cwd: Path,
    writable: Sequence[Path],
    network: bool,
    as_root: bool,
) -> list[str]:
    """The full command line: ``bwrap <options> -- [setpriv ... --] <argv>``."""
    out = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    out += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if not network:
        out.append("--unshare-net")
    if not as_root:
        out += ["--unshare-user", "--uid", str(isolation.uid), "--gid", str(isolation.gid)]
    mounts = _Mounts()
    read_only = list(isolation.visible_paths())
    for system in SYSTEM_PATHS:
        path = Path(system)
        if path.is_symlink():  # merged /usr: /bin -> usr/bin
            mounts.symlink(os.readlink(path), path)
        elif path.is_dir():
            mounts.bind("--ro-bind", path)
    for path in read_only:
        mounts.bind("--ro-bind", path)
    mounts.special("--proc", Path("/proc"))
    mounts.special("--dev", Path("/dev"))
    mounts.tmpfs(Path("/tmp"), mode="1777")  # noqa: S108 (the sandbox's own, empty)
    for hidden in isolation.hidden:
        mounts.mask(Path(os.path.realpath(hidden)))
    for path in writable:
        mounts.bind("--bind", Path(os.path.realpath(path)))
    out += mounts.args
    out += ["--chdir", os.path.realpath(cwd)]
    if as_root:
        out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        out += ["--", *drop_privileges(isolation.uid, isolation.gid)]
    else:
        out.append("--")
    return [*out, *argv]


class _Mounts:
    """bwrap mount arguments in order, with the directories leading to them.

    The new root is an empty tmpfs; bwrap would create the parents of a
    mount point (``/work/ws-1`` needs ``/work``) as root-only directories the
    sandbox user cannot cross, so they are created first, world-readable.
    """

    def __init__(self) -> None:
        self.args: list[str] = []
        #: Mount points and whether each is an (empty, writable) tmpfs.
        self._points: dict[Path, bool] = {Path("/"): True}

    def _parents(self, target: Path) -> None:
        for parent in reversed(target.parents):
            if parent in self._points:
                continue
            deepest = max((p for p in self._points if p in parent.parents), key=_depth)
            if self._points[deepest]:
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self._points[parent] = True

    def bind(self, kind: str, path: Path) -> None:
        self._parents(path)
        self.args += [kind, str(path), str(path)]
        self._points[path] = False

    def symlink(self, target: str, path: Path) -> None:
        self.args += ["--symlink", target, str(path)]
        self._points[path] = False

    def special(self, kind: str, path: Path) -> None:
        self.args += [kind, str(path)]
        self._points[path] = False

    def tmpfs(self, path: Path, *, mode: str = "0755") -> None:
        self._parents(path)
        self.args += ["--perms", mode, "--tmpfs", str(path)]
        self._points[path] = True

    def mask(self, path: Path) -> None:
        """Hide ``path`` if something mounted so far shows it."""
        covering = [p for p in self._points if p == path or p in path.parents]
        deepest = max(covering, key=_depth)
        if self._points[deepest] or not path.exists():
            return  # on one of our empty tmpfs: not there at all
        if path.is_dir():
            self.tmpfs(path, mode="0700")
        else:
            self.args += ["--ro-bind", "/dev/null", str(path)]


def _depth(path: Path) -> int:
    return len(path.parts)


def drop_privileges(uid: int, gid: int) -> list[str]:
    return [
        SETPRIV,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
