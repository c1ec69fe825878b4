"""File access for the built-in agent, confined to the checkout.

The model chooses paths, and the repository is hostile: a path may try
``..``, an absolute name, or a symlink the repository planted (git mode
120000) pointing at the worker's files. So every access walks the path one
component at a time from a descriptor of the checkout, with ``O_NOFOLLOW``
on each (``openat``-style, no window between check and use), refuses
``.git``, and checks that the resolved path stays inside the checkout.
Symlinks are never followed, listed or searched. Opens are non-blocking
and only regular files are read or written (a FIFO or device the sandbox
planted is refused, never waited on); the tools call this off the event
loop (:mod:`app.agent.tools`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

#: Largest file the agent may read or write whole.
MAX_FILE_BYTES = 1024 * 1024


class FileRefused(Exception):
    """A path or operation the agent may not perform; the message is for the model."""


class Checkout:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._real_root = os.path.realpath(self.root)

    def parts(self, relative: str) -> list[str]:
        """The path's components, refused when it leaves the checkout."""
        path = PurePosixPath(relative.strip() or ".")
        if path.is_absolute():
            raise FileRefused(f"{relative}: use a path relative to the repository root")
        parts = [p for p in path.parts if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise FileRefused(f"{relative}: `..` is not allowed")
        if parts and parts[0] == ".git":
            raise FileRefused(f"{relative}: the .git directory is off limits")
        return parts

    @contextlib.contextmanager
    def _dir(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts``, reached without following links."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:  # ELOOP / ENOTDIR: a symlink or a file
                    raise FileRefused(f"{'/'.join(parts)}: not a plain directory") from exc
                os.close(fd)
                fd = nxt
            real = os.path.realpath(f"/proc/self/fd/{fd}")
            if os.path.exists("/proc/self/fd") and not (
                real == self._real_root or real.startswith(self._real_root + os.sep)
            ):
                raise FileRefused(f"{'/'.join(parts)}: outside the repository")
            yield fd
        finally:
            os.close(fd)

    def read(self, relative: str) -> bytes:
        parts = self.parts(relative)
        if not parts:
            raise FileRefused("give a file path")
        try:
            with self._dir(parts[:-1]) as parent:
                # O_NONBLOCK: opening a FIFO the sandbox planted returns at
                # once (and is refused below) instead of waiting for a writer.
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
        except FileNotFoundError:
            raise FileRefused(f"{relative}: no such file") from None
        except OSError as exc:
            raise FileRefused(
                f"{relative}: cannot be read ({exc.strerror}; symlinks are not followed)"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FileRefused(f"{relative}: not a regular file")
            if info.st_size > MAX_FILE_BYTES:
                raise FileRefused(f"{relative}: larger than {MAX_FILE_BYTES} bytes")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)

    def write(self, relative: str, data: bytes) -> None:
        parts = self.parts(relative)
        if not parts:
            raise FileRefused("give a file path")
        if len(data) > MAX_FILE_BYTES:
            raise FileRefused(f"{relative}: content larger than {MAX_FILE_BYTES} bytes")
        # No O_TRUNC before the type check: a FIFO must not be opened for
        # writing (O_NONBLOCK makes that fail at once when no reader waits).
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            with self._dir(parts[:-1], create=True) as parent:
                fd = os.open(parts[-1], flags, 0o644, dir_fd=parent)
        except FileRefused:
            raise
        except OSError as exc:
            raise FileRefused(
                f"{relative}: cannot be written ({exc.strerror}; symlinks are not followed)"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileRefused(f"{relative}: not a regular file")
            os.ftruncate(fd, 0)
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(data)
        finally:
            os.close(fd)

    def walk(self, relative: str = ".") -> Iterator[str]:
        """Regular files under ``relative`` (sorted; no symlinks, no ``.git``)."""
        parts = self.parts(relative)
        base = self.root.joinpath(*parts)
        try:
            info = os.lstat(base)
        except FileNotFoundError:
            raise FileRefused(f"{relative}: no such file or directory") from None
        if stat.S_ISREG(info.st_mode):
            yield "/".join(parts)
            return
        with self._dir(parts):
            pass  # refuses a path through a symlinked directory
        for directory, dirs, files in os.walk(base, followlinks=False):
            rel_dir = os.path.relpath(directory, self.root)
            dirs[:] = sorted(
                d
                for d in dirs
                if not (rel_dir == "." and d == ".git")
                and not os.path.islink(os.path.join(directory, d))
            )
            for name in sorted(files):
                path = os.path.join(directory, name)
                if stat.S_ISREG(os.lstat(path).st_mode):
                    yield os.path.normpath(os.path.relpath(path, self.root)).replace(os.sep, "/")
