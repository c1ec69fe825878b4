"""The seccomp filter every sandboxed command runs under: the usual kernel attack surface, denied.

A classic BPF program (``struct sock_filter[]``), built here in Python for
the machine's architecture; bubblewrap loads it with ``--seccomp FD`` and the
``unshare`` backend with ``prctl(PR_SET_SECCOMP)`` (:mod:`app.sandbox.enter`),
after ``no_new_privs``. Denied with ``EPERM``:

- new namespaces: ``unshare``, ``setns``, and ``clone`` with any
  ``CLONE_NEW*`` flag (nested user namespaces would give the command a full
  capability set over new namespaces); ``clone3`` answers ``ENOSYS`` because
  its flags live in memory a filter cannot read, and libc then falls back to
  ``clone`` (threads, ``fork``, ``multiprocessing`` keep working);
- ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, the key
  ring (``keyctl``, ``add_key``, ``request_key``): frequent kernel exploit
  entry points that a build or test never needs;
- ``ptrace``, ``process_vm_readv/writev``, ``pidfd_getfd``;
- mounting (``mount``, ``umount2``, ``pivot_root``, the new mount API),
  ``open_by_handle_at``/``name_to_handle_at``, kernel modules, ``kexec``,
  ``reboot``, ``swapon/off``, ``acct``, ``quotactl``, ``syslog``,
  ``vhangup``, ``lookup_dcookie``; on x86-64 also ``iopl``, ``ioperm``,
  ``uselib``.

A system call of another ABI (i386 through ``int 0x80`` on x86-64, x32) is
denied outright: its numbers differ and would slip past the list.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
#: offsetof(struct seccomp_data, ...)
_NR, _ARCH, _ARG0 = 0, 4, 16
#: Every CLONE_NEW* flag clone(2) takes in its first argument.
CLONE_NEW_FLAGS = 0x7E020000
#: x32 system calls on x86-64 carry this bit.
_X32_BIT = 0x40000000


@dataclass(frozen=True)
class Arch:
    audit: int
    clone: int
    clone3: int
    denied: dict[str, int]


_COMMON_NEW = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}

ARCHES = {
    "x86_64": Arch(
        audit=0xC000003E,
        clone=56,
        clone3=435,
        denied={
            "unshare": 272,
            "setns": 308,
            "bpf": 321,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "userfaultfd": 323,
            "perf_event_open": 298,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "acct": 163,
            "quotactl": 179,
            "syslog": 103,
            "vhangup": 153,
            "lookup_dcookie": 212,
            "iopl": 172,
            "ioperm": 173,
            "uselib": 134,
            **_COMMON_NEW,
        },
    ),
    "aarch64": Arch(
        audit=0xC00000B7,
        clone=220,
        clone3=435,
        denied={
            "unshare": 97,
            "setns": 268,
            "bpf": 280,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "userfaultfd": 282,
            "perf_event_open": 241,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "acct": 89,
            "quotactl": 60,
            "syslog": 116,
            "vhangup": 58,
            "lookup_dcookie": 18,
            **_COMMON_NEW,
        },
    ),
}


class SeccompUnsupported(RuntimeError):
    """No filter is known for this machine's architecture."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one), as ``struct sock_filter[]`` bytes."""
    machine = machine or os.uname().machine
    arch = ARCHES.get(machine)
    if arch is None:
        raise SeccompUnsupported(f"no seccomp filter for {machine}: the sandbox refuses to run")
    denied = sorted(set(arch.denied.values()))
    # Layout: the checks, then four returns at fixed places from the end:
    #   [-4] ALLOW, [-3] EPERM, [-2] ENOSYS, and the clone flag check before them.
    body: list[tuple[int, int, str | None, str | None]] = []  # code, k, jump-if-true, -false
    body.append((_LD_W_ABS, _ARCH, None, None))
    body.append((_JEQ_K, arch.audit, None, "eperm"))
    body.append((_LD_W_ABS, _NR, None, None))
    if machine == "x86_64":
        body.append((_JGE_K, _X32_BIT, "eperm", None))
    for number in denied:
        body.append((_JEQ_K, number, "eperm", None))
    body.append((_JEQ_K, arch.clone3, "enosys", None))
    body.append((_JEQ_K, arch.clone, "clone", None))
    body.append((_RET_K, RET_ALLOW, None, None))
    labels = {"clone": len(body)}
    body.append((_LD_W_ABS, _ARG0, None, None))  # low 32 bits of the flags (little-endian)
    body.append((_JSET_K, CLONE_NEW_FLAGS, "eperm", None))
    body.append((_RET_K, RET_ALLOW, None, None))
    labels["eperm"] = len(body)
    body.append((_RET_K, RET_ERRNO | EPERM, None, None))
    labels["enosys"] = len(body)
    body.append((_RET_K, RET_ERRNO | ENOSYS, None, None))
    out = []
    for index, (code, k, true, false) in enumerate(body):
        jt = labels[true] - index - 1 if true else 0
        jf = labels[false] - index - 1 if false else 0
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise AssertionError("seccomp jump out of range")  # a programming error
        out.append(_insn(code, k, jt, jf))
    return b"".join(out)


def memfd(machine: str | None = None) -> int:
    """A descriptor holding the program, at offset 0 (for ``bwrap --seccomp FD``)."""
    fd = os.memfd_create("repairbot-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program(machine))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
