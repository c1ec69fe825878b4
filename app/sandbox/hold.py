"""Start a sandboxed command held before its first instruction, limit it from
the worker, then let it go: the cgroup and rlimits without ``preexec_fn``.

Why: a ``preexec_fn`` makes CPython ``fork`` the whole worker instead of
``vfork``-ing it: the page tables of a ~140 MiB process copied, then
copy-on-write faults in the child while the Python function runs. Measured
in a worker-sized process (130 MiB touched, 20 threads): 3 ms of the worker's
CPU and 4 ms of the child's per command with a ``preexec_fn``, 0.1 ms and
1 ms held this way (``docs/benchmarks.md``); a repair run starts six
sandboxed commands.

How: the child starts as ``/bin/sh`` reading one line from its stdin, a pipe
from the worker, before it does anything else. While it waits, the worker
moves it into the command's cgroup and lowers its rlimits (``prlimit(2)`` on
the child, no program of its own), then writes the line; the shell ``exec``-s
the sandbox in the same process, so the cgroup and the limits hold for all it
starts, with stdin from ``/dev/null``. Fail closed: when a step fails or the
worker stops first, the pipe closes without the line, ``read`` meets the end
of the file and the shell exits without running anything.
"""

from __future__ import annotations

import resource
from collections.abc import Sequence

from app.sandbox.cgroups import CommandCgroup

#: The held shell (``$0`` names it in ``ps`` and in its own errors). It reads
#: nothing of the command: ``"$@"`` hands the argv on as it is.
HOLD = ("/bin/sh", "-c", 'read -r _ && exec "$@" </dev/null', "repairbot-held")
#: What lets a held command go.
GO = b"\n"

#: An rlimit to set: (``resource.RLIMIT_*``, the soft and hard value).
Rlimit = tuple[int, int]


def limit(pid: int, cgroup: CommandCgroup | None, rlimits: Sequence[Rlimit]) -> None:
    """Put the held child ``pid`` in ``cgroup`` and lower its rlimits (never
    above the hard limit it inherited: an unprivileged worker may only lower).
    Raises OSError; the caller must then not let the child go."""
    if cgroup is not None:
        cgroup.add(pid)
    for kind, value in rlimits:
        _, hard = resource.prlimit(pid, kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.prlimit(pid, kind, (value, value))
