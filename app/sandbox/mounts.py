"""The sandbox's file system view as a list of mount steps, whatever builds it.

Both backends (bubblewrap, and ``unshare`` with :mod:`app.sandbox.enter`)
build the same view from :func:`plan`: an empty tmpfs root; the system
directories and the other read-only paths; a private ``/proc``, ``/dev`` and
``/tmp``; masks over hidden paths that a read-only path would show; the
writable paths last. Steps are tuples so they travel as JSON::

    ("ro" | "rw", path)        bind the host's path at the same place
    ("symlink", path, target)  /bin -> usr/bin on merged-/usr systems
    ("dir", path)              a world-readable directory leading to a mount
    ("tmpfs", path, mode)      an empty tmpfs
    ("tmpfs", path, mode, n)   an empty tmpfs of at most n bytes
    ("null", path)             /dev/null over a hidden file
    ("proc", path), ("dev", path)
    ("sock", path, source)     a unix socket from outside (a port forward)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from app.sandbox.policy import SYSTEM_PATHS, Isolation

Step = tuple[str, ...]


def plan(
    isolation: Isolation,
    writable: Sequence[Path],
    sockets: Sequence[tuple[str, Path]] = (),
    *,
    tmpfs_bytes: int | None = None,
) -> list[Step]:
    """The mount steps; ``sockets`` are (path inside, socket outside) pairs;
    ``tmpfs_bytes`` bounds the sandbox's writable tmpfs (``/tmp``, ``/dev/shm``)."""
    mounts = _Mounts()
    for system in SYSTEM_PATHS:
        path = Path(system)
        if path.is_symlink():  # merged /usr: /bin -> usr/bin
            mounts.add(("symlink", system, os.readlink(path)), path, tmpfs=False)
        elif path.is_dir():
            mounts.bind("ro", path)
    mounts.add(("proc", "/proc"), Path("/proc"), tmpfs=False)
    mounts.add(("dev", "/dev"), Path("/dev"), tmpfs=False)
    # POSIX semaphores and shared memory (multiprocessing's locks and queues)
    # live in /dev/shm; the sandbox user must be able to create them there.
    mounts.tmpfs(Path("/dev/shm"), mode="1777", size=tmpfs_bytes)  # noqa: S108 (its own, empty)
    mounts.tmpfs(Path("/tmp"), mode="1777", size=tmpfs_bytes)  # noqa: S108 (its own, empty)
    for path in isolation.visible_paths():  # after /tmp: one may lie under it
        mounts.bind("ro", path)
    for hidden in isolation.hidden:
        mounts.mask(Path(os.path.realpath(hidden)))
    for path in writable:
        mounts.bind("rw", Path(os.path.realpath(path)))
    for inside, outside in sockets:  # last: nothing may cover them
        mounts.add(("sock", inside, str(outside)), Path(inside), tmpfs=False)
    return mounts.steps


class _Mounts:
    """Mount steps in order, with the directories leading to them.

    bubblewrap would create the parents of a mount point (``/srv/ws-1``
    needs ``/srv``) as root-only directories the sandbox user cannot cross,
    so they are created first, world-readable.
    """

    def __init__(self) -> None:
        self.steps: list[Step] = []
        #: Mount points and whether each is an (empty, writable) tmpfs.
        self._points: dict[Path, bool] = {Path("/"): True}

    def _parents(self, target: Path) -> None:
        # Walk down from the root, keeping the deepest mount point seen so far:
        # one dictionary look-up per parent (a search of every mount point's
        # ancestors for every parent made plan() a millisecond per command).
        covering = Path("/")
        for parent in reversed(target.parents):
            if parent in self._points:
                covering = parent
            elif self._points[covering]:
                self.steps.append(("dir", str(parent)))
                self._points[parent] = True
                covering = parent

    def _deepest_point(self, path: Path) -> Path:
        """The deepest mount point at or above ``path`` (``/`` always is one)."""
        return next(point for point in (path, *path.parents) if point in self._points)

    def add(self, step: Step, path: Path, *, tmpfs: bool) -> None:
        self._parents(path)
        self.steps.append(step)
        self._points[path] = tmpfs

    def bind(self, kind: str, path: Path) -> None:
        self.add((kind, str(path)), path, tmpfs=False)

    def tmpfs(self, path: Path, *, mode: str = "0755", size: int | None = None) -> None:
        step = ("tmpfs", str(path), mode) if size is None else ("tmpfs", str(path), mode, str(size))
        self.add(step, path, tmpfs=True)

    def mask(self, path: Path) -> None:
        """Hide ``path`` if something mounted so far shows it."""
        if self._points[self._deepest_point(path)] or not path.exists():
            return  # on one of our empty tmpfs: not there at all
        if path.is_dir():
            self.tmpfs(path, mode="0700")
        else:
            self.steps.append(("null", str(path)))


def shows(steps: Sequence[Step], path: Path) -> bool:
    """Whether the view ``steps`` build shows the host's ``path`` (resolved).

    The last step covering the path decides: a bind shows the host's file, a
    tmpfs, a device or a mask does not. A program found on the worker's
    ``PATH`` that the sandbox does not show is reported as missing instead of
    failing obscurely inside (bubblewrap's own exit 1 would read as a failure
    of the command).
    """
    real = Path(os.path.realpath(path))
    deciding: Step | None = None
    for step in steps:
        if step[0] in ("symlink", "dir"):
            continue
        mounted = Path(step[1])
        if mounted == real or mounted in real.parents:
            deciding = step
    return deciding is not None and deciding[0] in ("ro", "rw")
