"""Per-command cgroups (v1 ``memory`` and ``pids`` controllers) where the host allows.

A cgroup bounds the whole tree a command starts, not one process: memory
counts every process together (a fork of a fork cannot double the budget)
and ``pids.max`` stops a fork bomb at a fixed number of tasks, whatever the
user id. Rlimits remain as the fallback where cgroups are not writable (an
unprivileged worker, a cgroup v2 host without delegation); the command's
result says which one applied.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Our own subtree under each controller, so the worker's cgroups stay untouched.
PARENT = "repairbot"


@dataclass(frozen=True)
class CommandCgroup:
    """One command's directories under the ``memory`` and ``pids`` hierarchies."""

    memory: Path
    pids: Path

    @classmethod
    def create(
        cls, *, memory_bytes: int | None, max_tasks: int | None, root: Path = CGROUP_ROOT
    ) -> CommandCgroup | None:
        """A fresh cgroup with the limits set, or ``None`` when the host offers none."""
        memory_root, pids_root = root / "memory", root / "pids"
        if not (_writable(memory_root) and _writable(pids_root)):
            return None
        name = f"cmd-{uuid.uuid4().hex[:16]}"
        group = cls(memory=memory_root / PARENT / name, pids=pids_root / PARENT / name)
        try:
            group.memory.mkdir(parents=True)
            group.pids.mkdir(parents=True)
            if memory_bytes is not None:
                (group.memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                swap = group.memory / "memory.memsw.limit_in_bytes"
                if swap.exists():  # only with swap accounting; else there is no swap to use
                    swap.write_text(str(memory_bytes))
            if max_tasks is not None:
                (group.pids / "pids.max").write_text(str(max_tasks))
        except OSError:
            group.remove()
            return None
        return group

    def add(self, pid: int) -> None:
        """Move process ``pid`` in (a held child, before it runs anything: see
        :mod:`app.sandbox.hold`); what it starts from then on is in too."""
        for directory in (self.memory, self.pids):
            fd = os.open(directory / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)

    def tasks(self) -> list[int]:
        try:
            text = (self.pids / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(line) for line in text.split()]

    def kill_all(self) -> None:
        for pid in self.tasks():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove both directories (best effort, never raises)."""
        for _ in range(200):  # killed tasks take a moment to leave the group
            self.kill_all()
            for directory in (self.memory, self.pids):
                with contextlib.suppress(FileNotFoundError):
                    try:
                        directory.rmdir()
                    except OSError:
                        continue
            if not (self.memory.exists() or self.pids.exists()):
                return
            time.sleep(0.005)


def _writable(controller: Path) -> bool:
    return (controller / "cgroup.procs").exists() and os.access(controller, os.W_OK)
