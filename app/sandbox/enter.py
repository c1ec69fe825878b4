"""Build the sandbox from inside ``unshare`` (the fallback backend), then exec the command.

Run as ``python -I enter.py <spec json>`` by :mod:`app.sandbox.unshare_backend`
in fresh mount, PID, IPC, UTS (and network) namespaces, as root of them.
Standard library only: it runs before anything else is visible. It builds
the same view bubblewrap would: an empty tmpfs root, read-only binds, masks,
read-write binds, a private ``/proc``, ``/dev`` and ``/tmp``; pivots into it,
empties the capability bounding set, drops to the sandbox user (a real
user when the worker is root; a subordinate uid of the worker's user
namespace otherwise, see :mod:`app.sandbox.userns`), forbids new
privileges, loads the seccomp filter and executes the command. Any failure
exits 125 before the command runs.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
#: pivot_root(2) has no libc wrapper; its system call number per architecture.
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_ST_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC}

libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {source} {target}",
    )


def bind(source: str, target: str, *, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):  # the mount point; may already be there, read-only
            open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        # Flags the kernel locked on the source (nosuid, nodev...) must be kept.
        kept = 0
        stat_flags = os.statvfs(target).f_flag
        for bit, flag in _ST_FLAGS.items():
            if stat_flags & bit:
                kept |= flag
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def build(spec: dict) -> None:  # type: ignore[type-arg]
    root = spec["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for item in spec["mounts"]:
        kind, path = item[0], item[1]
        target = root + path
        if kind == "symlink":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(item[2], target)
        elif kind == "dir":
            os.makedirs(target, mode=0o755, exist_ok=True)
            os.chmod(target, 0o755)  # noqa: S103 (a directory on the way, like /usr)
        elif kind in ("ro", "rw"):
            bind(path, target, read_only=kind == "ro")
        elif kind == "tmpfs":
            os.makedirs(target, exist_ok=True)
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={item[2]}")
        elif kind == "null":
            bind("/dev/null", target, read_only=True)
        elif kind == "sock":
            bind(item[2], target, read_only=False)
        elif kind == "proc":
            os.makedirs(target, exist_ok=True)
            mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        elif kind == "dev":
            os.makedirs(target, exist_ok=True)
            mount("tmpfs", target, "tmpfs", MS_NOSUID, "mode=0755")
            for node in ("null", "zero", "full", "random", "urandom", "tty"):
                bind(f"/dev/{node}", f"{target}/{node}", read_only=False)
            for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
                os.symlink(link, f"{target}/{name}")
            os.symlink("/proc/self/fd/1", f"{target}/stdout")
            os.symlink("/proc/self/fd/2", f"{target}/stderr")
    _loopback_up()  # a network namespace of its own: bring its lo up
    os.chdir(root)
    _check(libc.syscall(_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir(spec["cwd"])


def _loopback_up() -> None:
    """A new network namespace starts with ``lo`` down; tests often listen on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _drop_bounding_set() -> None:
    """No capability can come back, not even through an exec as root."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _load_seccomp(program: bytes) -> None:
    fprog = _SockFprog(len(program) // 8, program)
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        build(spec)
        _drop_bounding_set()
        # Root here is real root or, for an unprivileged worker, root of the
        # user namespace it made, where ``uid`` is a subordinate uid: either
        # way a user that is not the worker and owns none of the mounts.
        os.setgroups([])
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        if spec.get("close_fd") is not None:
            os.close(spec["close_fd"])  # the user namespace: nothing for the command
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _load_seccomp(bytes.fromhex(spec["seccomp"]))
    except OSError as exc:
        print(f"repairbot sandbox (unshare): {exc}", file=sys.stderr)
        sys.exit(125)
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)  # noqa: S606 (argv, never a shell string)
    except OSError as exc:
        print(f"repairbot sandbox: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
