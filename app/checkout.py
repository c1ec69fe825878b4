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

Files the sandbox wrote outside a checkout (an agent's result file,
transcripts) are read with :func:`read_untrusted`: the same no-follow,
non-blocking, regular-file-only rules with a size cap, off the event loop.
This module is the one place the worker reads such files.
"""

from __future__ import annotations

import asyncio
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


#: Largest file the worker reads whole from anywhere the sandbox could write.
DEFAULT_UNTRUSTED_LIMIT = 1 << 20


class TooLarge(UnsafePath):
    """The file is larger than the caller's cap."""


def read_untrusted_sync(path: Path, *, limit: int = DEFAULT_UNTRUSTED_LIMIT) -> bytes:
    """``path``'s content, read the way every file the sandbox touched is read.

    ``O_NOFOLLOW`` (a symlink to ``/dev/zero`` or a key is refused),
    ``O_NONBLOCK`` (opening a FIFO returns at once instead of waiting for a
    writer), ``fstat`` must say regular file (no FIFO, device or socket), and
    at most ``limit`` bytes: a larger file raises :class:`TooLarge` rather
    than being read. Raises :class:`FileNotFoundError` when absent.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(exc.errno, "a symlink", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            raise TooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        # The file may grow after fstat (the sandbox may still be writing):
        # read one byte past the cap to notice.
        data = _read(fd, limit + 1)
        if len(data) > limit:
            raise TooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
        return data
    finally:
        os.close(fd)


async def read_untrusted(path: Path, *, limit: int = DEFAULT_UNTRUSTED_LIMIT) -> bytes:
    """:func:`read_untrusted_sync` off the event loop: a slow disk or a huge
    file never stalls the worker's other runs and heartbeats."""
    return await asyncio.to_thread(read_untrusted_sync, path, limit=limit)
