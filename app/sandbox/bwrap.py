"""The bubblewrap backend: argv for ``bwrap`` that builds the sandbox.

Namespaces: PID (the command's tree dies with it: bwrap's init is PID 1 and
``--die-with-parent`` ties it to us), mount (a new root holding only what
:class:`~app.sandbox.policy.Isolation` lists), network (only a loopback of
its own, always: a step that may use the network reaches only the egress
proxy, through a socket bound in, see :mod:`app.sandbox.egress`), IPC and UTS. A private
``/proc`` and ``/tmp``, a minimal ``/dev``.

System calls: a seccomp filter (:mod:`app.sandbox.seccomp`) denies new
namespaces, ``bpf``, ``keyctl``, ``io_uring``, ``perf_event_open``,
``userfaultfd``, ``ptrace``, mounting and more.

User: a root worker keeps no privilege inside. bwrap runs as root to build
the mounts, then ``setpriv`` drops to the sandbox uid/gid with no groups, no
capabilities (bounding set included) and ``no_new_privs``, so setuid
programs cannot climb back. An unprivileged worker uses a user namespace
instead, with ``--disable-userns`` so that the command cannot create another
one. There the sandbox user (uid 65534 inside) is the worker's user to the
kernel outside: what keeps the worker's files from it is that they are not
mounted (or masked), not their mode; see docs/security.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from app.sandbox.mounts import Step, plan
from app.sandbox.policy import Isolation

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
    as_root: bool,
    seccomp_fd: int,
    sockets: Sequence[tuple[str, Path]] = (),
    tmpfs_bytes: int | None = None,
) -> list[str]:
    """The full command line: ``bwrap <options> -- [setpriv ... --] <argv>``.

    ``seccomp_fd``: a descriptor the child inherits holding the filter
    (:func:`app.sandbox.seccomp.memfd`).
    """
    out = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    out += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    out.append("--unshare-net")  # never the host's network (docs/security.md)
    out += ["--seccomp", str(seccomp_fd)]
    if not as_root:
        out += ["--unshare-user", "--uid", str(isolation.uid), "--gid", str(isolation.gid)]
        # No nested user namespace (and its fresh capability set). The root
        # path has no user namespace to limit: its seccomp filter denies them.
        out.append("--disable-userns")
    for step in plan(isolation, writable, sockets, tmpfs_bytes=tmpfs_bytes):
        out += _render(step)
    out += ["--chdir", os.path.realpath(cwd)]
    if as_root:
        out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        out += ["--", *drop_privileges(isolation.uid, isolation.gid)]
    else:
        out.append("--")
    return [*out, *argv]


def _render(step: Step) -> list[str]:
    kind, path = step[0], step[1]
    if kind == "ro":
        return ["--ro-bind", path, path]
    if kind == "rw":
        return ["--bind", path, path]
    if kind == "symlink":
        return ["--symlink", step[2], path]
    if kind == "dir":
        return ["--perms", "0755", "--dir", path]
    if kind == "tmpfs":
        size = ["--size", step[3]] if len(step) > 3 else []
        return ["--perms", step[2], *size, "--tmpfs", path]
    if kind == "sock":
        return ["--bind", step[2], path]
    if kind == "null":
        return ["--ro-bind", "/dev/null", path]
    return [f"--{kind}", path]  # proc, dev


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
