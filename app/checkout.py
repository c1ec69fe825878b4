"""Reading files of a checkout that hostile code may have arranged.

A repository can track a symlink (``git`` mode 120000) such as
``notes.txt -> /data/key.pem``, or make ``.github`` a link to anywhere; a
command or agent that ran in the workspace can plant the same. The worker
reads files from checkouts to send them to a model and to read the
repository's config, so every read here:

- walks the path one component at a time from the checkout root with
  ``O_NOFOLLOW`` (a symlink anywhere on the way, ``.github`` included, is
  refused, not followed);
- opens only a regular file (not a FIFO that would block, not a device);
- checks the resolved path is still inside the checkout.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


class UnsafePath(OSError):
    """The path leads through a symlink or to something that is not a regular file."""


def read_in_checkout(root: Path, relative: str, *, limit: int | None = None) -> bytes:
    """Up to ``limit`` bytes of ``root/relative``.

    Raises :class:`FileNotFoundError` when absent, :class:`UnsafePath` when
    any component is a symlink or the target is not a regular file.
    """
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafePath(errno.EINVAL, "not a path inside the checkout", relative)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                next_fd = os.open(
                    part,
                    flags | (os.O_NONBLOCK if last else os.O_DIRECTORY),
                    dir_fd=fd,
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, "a symlink or not a directory", relative) from None
                raise
            os.close(fd)
            fd = next_fd
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(errno.EINVAL, "not a regular file", relative)
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if root.resolve() not in real.parents:
            raise UnsafePath(errno.EXDEV, "outside the checkout", relative)
        return _read(fd, limit if limit is not None else info.st_size)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _read(fd: int, limit: int) -> bytes:
    chunks = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
