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

User: the command never runs as the worker's uid nor with any privilege.
bwrap builds the mounts as root (a root worker: real root; an unprivileged
worker: root of a user namespace made beforehand, ``--userns``, in which
uid 65534 is the worker's first subordinate uid, see
:mod:`app.sandbox.userns`), then ``setpriv`` drops to the sandbox uid/gid
with no groups, no capabilities (bounding set included) and
``no_new_privs``, so setuid programs cannot climb back. In that user
namespace no further one can be made (``user.max_user_namespaces`` = 0, set
by its root, which the command is not); the seccomp filter denies them too.
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
    seccomp_fd: int,
    userns_fd: int | None,
    sockets: Sequence[tuple[str, Path]] = (),
) -> list[str]:
    """The full command line: ``bwrap <options> -- setpriv ... -- <argv>``.

    ``seccomp_fd``: a descriptor the child inherits holding the filter
    (:func:`app.sandbox.seccomp.memfd`); ``userns_fd``: the user namespace an
    unprivileged worker made (``None`` for a root worker).
    """
    out = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    out += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    out.append("--unshare-net")  # never the host's network (docs/security.md)
    out += ["--seccomp", str(seccomp_fd)]
    if userns_fd is not None:
        out += ["--userns", str(userns_fd)]
    for step in plan(isolation, writable, sockets):
        out += _render(step)
    out += ["--chdir", os.path.realpath(cwd)]
    out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    out += ["--", *drop_privileges(isolation.uid, isolation.gid)]
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
        return ["--perms", step[2], "--tmpfs", path]
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
