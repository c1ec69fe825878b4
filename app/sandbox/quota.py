"""The workspace's disk quota, enforced while a sandboxed command runs.

Three mechanisms, each for what the others cannot see (docs/security.md):

- ``RLIMIT_FSIZE`` at the quota (:class:`~app.sandbox.runner.ResourceLimits`):
  the kernel refuses to grow any one file past it, sparse files included
  (``EFBIG`` / ``SIGXFSZ``), at once and whatever the write rate.
- Size-limited tmpfs for the sandbox's own ``/tmp`` and ``/dev/shm``
  (:mod:`app.sandbox.mounts`): they are memory, not the workspace, and
  ``ENOSPC`` stops a command that fills them.
- This module's watcher: the writable paths (checkout, ``$HOME``,
  ``$TMPDIR``, scratch) are measured while the command runs (blocks
  actually used and entries, links never followed) and the whole sandbox is
  killed when either passes its limit. It catches many small files and
  millions of empty ones (inode exhaustion), which no per-file limit sees.
  It polls, so a fast writer can overshoot by what it writes in one period;
  the period adapts to the cost of a walk so a big tree does not eat the
  worker's CPU.

An unprivileged worker is not the sandbox user (:mod:`app.sandbox.userns`),
so a ``0700`` directory the command makes (``mktemp -d``, pytest's
``tmp_path``) is closed to it. There the walks run inside the command's
user namespace, as its root, whose ``CAP_DAC_READ_SEARCH`` reads every file
of a user the namespace maps: in the helper process that made the namespace
(:mod:`app.sandbox.userns_helper`, which loads :mod:`app.sandbox.quota_walk`:
the light part of the standard library only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.sandbox.quota_walk import walk
from app.sandbox.userns import UserNamespace

_MiB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class DiskQuota:
    """What the writable paths of one command may hold together."""

    bytes: int
    #: Files, directories and links (a command creating millions of empty
    #: files uses no blocks but exhausts the host's inodes).
    entries: int = 1_000_000
    #: Seconds between two measurements, at least (see :class:`QuotaWatch`).
    interval: float = 0.2

    def exceeded_by(self, usage: Usage) -> str | None:
        """Why ``usage`` is over this quota (one line), or None."""
        if usage.bytes > self.bytes:
            return self.bytes_message()
        if usage.unmeasurable is not None:
            return f"the workspace holds {usage.unmeasurable}"
        if usage.entries > self.entries:
            return f"the workspace exceeded its quota of {self.entries} files and directories"
        return None

    def bytes_message(self) -> str:
        return f"the workspace exceeded its {self.bytes // _MiB} MiB disk quota"


@dataclass(frozen=True)
class Usage:
    bytes: int
    entries: int
    #: Why part of the tree could not be measured, or None. What cannot be
    #: measured counts as over the quota (fail closed): a path nested past
    #: PATH_MAX (relative mkdir and chdir), or a directory its own user made
    #: unlistable (``chmod 300``: still writable) where the worker is that
    #: user (the unprivileged path; root reads everything).
    unmeasurable: str | None = None


def measure(paths: Sequence[Path], quota: DiskQuota) -> Usage:
    """Blocks used and entries under ``paths`` (links not followed, hard
    links counted once); stops as soon as either passes ``quota``."""
    used, entries, why = walk([str(p) for p in paths], quota.bytes, quota.entries)
    return Usage(used, entries, unmeasurable=why)


class NamespaceProbe:
    """Measures inside a command's user namespace: its helper process walks
    once per request (:meth:`app.sandbox.userns.UserNamespace.measure`).

    Anything other than an answer (the helper died, or said something else)
    counts as unmeasurable, so over the quota (fail closed). Blocking: call
    it from the watch's thread.
    """

    def __init__(self, userns: UserNamespace, paths: Sequence[Path], quota: DiskQuota) -> None:
        self._userns = userns
        self._paths = list(paths)
        self._quota = quota

    def __call__(self) -> Usage:
        try:
            used, entries, why = self._userns.measure(
                self._paths, self._quota.bytes, self._quota.entries
            )
            return Usage(int(used), int(entries), unmeasurable=why and str(why))
        except (OSError, ValueError, TypeError) as exc:
            return Usage(0, 0, unmeasurable=f"a tree its disk quota could not measure ({exc})")


class _Walkers:
    """The watches' threads, kept between commands: a watch borrows one for
    its life and it goes back once the watch's last walk is over, so a
    command starts no thread of its own once the process has run as many at
    once. Each is a one-thread executor: a watch's walks run one after the
    other, on the same thread, and never wait for another watch's walk.
    """

    def __init__(self) -> None:
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()
        self._forgotten_at_fork = False

    def borrow(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if not self._forgotten_at_fork:
                # With the first thread, not at import (nothing happens at
                # import): a forked child must not inherit the kept executors.
                os.register_at_fork(after_in_child=self.forget)
                self._forgotten_at_fork = True
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="quota-watch")

    def give_back(self, thread: ThreadPoolExecutor) -> None:
        """Once nothing of the watch runs or waits on ``thread`` (on the
        thread itself, as its last work, when a walk was under way)."""
        with self._lock:
            self._idle.append(thread)

    def holds(self, thread: ThreadPoolExecutor) -> bool:
        """``thread`` is back, free for the next watch."""
        with self._lock:
            return thread in self._idle

    def forget(self) -> None:
        """In a forked child: the threads stayed in the parent, and an
        executor whose thread is gone never runs what it is handed."""
        self._idle = []
        self._lock = threading.Lock()


#: This process's watch threads.
WALKERS = _Walkers()


class QuotaWatch:
    """Measures ``paths`` in a thread until stopped; ``exceeded`` is set (and
    awaitable) once they hold more than ``quota`` allows.

    The pause between walks is at least ``quota.interval`` and at least four
    times the last walk's duration, so the watcher uses at most a fifth of a
    core however large the tree is. Walks run on a thread of the watch's own
    (borrowed from :data:`WALKERS` for the watch's life): a long walk must
    never hold a thread of the loop's default executor, which starts and
    cleans up every other command, nor wait behind another command's walk.

    ``userns``: the command's user namespace when the worker is not the
    sandbox user; the walks then run in its helper (:class:`NamespaceProbe`).
    """

    def __init__(
        self, paths: Sequence[Path], quota: DiskQuota, *, userns: UserNamespace | None = None
    ) -> None:
        self.paths = list(paths)
        self.quota = quota
        self._measure: Callable[[], Usage] = (
            NamespaceProbe(userns, paths, quota)
            if userns is not None
            else (lambda: measure(self.paths, quota))
        )
        self.exceeded = asyncio.Event()
        #: Why, once ``exceeded`` is set.
        self.reason: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._walked = asyncio.Event()
        self._thread = WALKERS.borrow()
        #: The last walk handed to ``_thread`` (it may outlive ``stop``).
        self._walk: Future[Usage] | None = None
        #: Done once the watch's thread went back to :data:`WALKERS` (after stop).
        self.released: Future[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        """Stop watching. A command that ended before the first walk did still
        gets that walk: a workspace already over its quota (an earlier command
        filled it) is reported whatever the timing."""
        if self._task is not None:
            if not self._task.done() and not self._walked.is_set():
                walked = asyncio.ensure_future(self._walked.wait())
                await asyncio.wait({self._task, walked}, return_when=asyncio.FIRST_COMPLETED)
                walked.cancel()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # A walk under way finishes by itself (it stops at the quota), and
        # only then does the thread go back for another command's watch;
        # with none (the watch was sleeping between walks) it goes back at
        # once, with no hand-off to it. (An unprivileged worker's walks run
        # in the namespace's helper, which the namespace's release ends.)
        if self._walk is None or self._walk.done():
            WALKERS.give_back(self._thread)
            self.released = Future()
            self.released.set_result(None)
        else:
            self.released = self._thread.submit(WALKERS.give_back, self._thread)

    async def _watch(self) -> None:
        while True:
            started = time.monotonic()
            self._walk = self._thread.submit(self._measure)
            usage = await asyncio.wrap_future(self._walk)
            self.reason = self.quota.exceeded_by(usage)
            self._walked.set()
            if self.reason is not None:
                self.exceeded.set()
                return
            took = time.monotonic() - started
            await asyncio.sleep(max(self.quota.interval, 4 * took))
