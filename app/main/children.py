"""How the worker and web processes learn that a subprocess exited.

On Python 3.11 asyncio's default child watcher (``ThreadedChildWatcher``)
starts a thread per subprocess to sit in ``waitpid``: a repair run starts
about 41 (git, bwrap), each a thread created, started and handed its result
back to the loop. :class:`PidfdWatcher` asks the kernel for a descriptor of
the child (``pidfd_open``, Linux 5.3) and lets the event loop that started
the child wait for it to become readable: no thread at all (0.19 ms of CPU
per spawn against 0.30 ms in a worker-sized process: ``python -m
bench.handoffs``, docs/benchmarks.md).

It is Python 3.12's ``PidfdChildWatcher``: each child is watched by the loop
that started it, so it is safe in a process that runs loops in other
threads too. 3.11's own ``PidfdChildWatcher`` is attached to one loop (the
main thread's), and a subprocess started from another thread's loop would
be registered on a loop it does not run in. 3.12 picks the pidfd watcher by
itself and deprecates ``set_child_watcher``, so nothing is installed there
(nor is :class:`PidfdWatcher` defined: 3.14 has no ``AbstractChildWatcher``).

A child whose descriptor cannot be had (out of descriptors; a kernel or a
seccomp policy without ``pidfd_open``) is waited for on a thread, as before:
a spawned child is always reaped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVarTuple, Unpack

log = logging.getLogger("repairbot.children")

_Ts = TypeVarTuple("_Ts")


# Python 3.12 deprecates the child watchers (3.14 removes them): the class is
# defined, and so subclasses one, only where it is used.
if sys.version_info < (3, 12):

    class PidfdWatcher(asyncio.AbstractChildWatcher):
        """Waits for each child on the running loop through a pidfd (see the module doc)."""

        def __init__(self) -> None:
            # Only for a child whose pidfd could not be opened.
            self._fallback = asyncio.ThreadedChildWatcher()

        def add_child_handler(
            self, pid: int, callback: Callable[[int, int, Unpack[_Ts]], object], *args: *_Ts
        ) -> None:
            loop = asyncio.get_running_loop()
            try:
                pidfd = os.pidfd_open(pid)
            except OSError as exc:
                # The child runs already: it must be reaped whatever happens.
                log.warning("no pidfd for child %d (%s): waiting for it on a thread", pid, exc)
                self._fallback.add_child_handler(pid, callback, *args)
                return
            loop.add_reader(pidfd, self._reap, loop, pid, pidfd, callback, args)

        @staticmethod
        def _reap(
            loop: asyncio.AbstractEventLoop,
            pid: int,
            pidfd: int,
            callback: Callable[..., object],
            args: tuple[Any, ...],
        ) -> None:
            """The pidfd is readable: the child has exited, ``waitpid`` does not block."""
            loop.remove_reader(pidfd)
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                # Reaped elsewhere; what asyncio's own watchers report then.
                returncode = 255
                log.warning("child %d was already reaped: its exit code is reported as 255", pid)
            else:
                returncode = os.waitstatus_to_exitcode(status)
            finally:
                os.close(pidfd)
            callback(pid, returncode, *args)

        def remove_child_handler(self, pid: int) -> bool:
            # asyncio never calls it (as in 3.12's watcher): a child is watched
            # until it exits.
            return True

        def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
            # Each child is watched by the loop that started it.
            pass

        def close(self) -> None:
            self._fallback.close()

        def is_active(self) -> bool:
            return True

        def __enter__(self) -> PidfdWatcher:
            return self

        def __exit__(
            self,
            typ: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> None:
            pass


def pidfd_works() -> bool:
    """``pidfd_open`` is there and allowed (a seccomp policy may refuse it)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def watch_children_without_threads() -> bool:
    """Install :class:`PidfdWatcher` for this process where it helps; True if
    installed. Call it first thing in a long-running process's main loop,
    before anything starts a subprocess."""
    if sys.version_info >= (3, 12) or not pidfd_works():
        return False
    asyncio.set_child_watcher(PidfdWatcher())
    return True
