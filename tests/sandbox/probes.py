"""Scripts run inside the sandbox (standard library only; passed with ``python -c``)."""

from __future__ import annotations

#: Calls each system call with harmless arguments; prints ``{name: errno or 0}`` as JSON.
#: Without the filter these do NOT fail with EPERM for an unprivileged user
#: (unshare(0) and ptrace(TRACEME) succeed, the rest fail on their arguments),
#: so EPERM shows the filter answered.
SYSCALLS = r"""
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
NR = {
    "x86_64": dict(unshare=272, setns=308, clone=56, clone3=435, bpf=321, keyctl=250,
                   add_key=248, request_key=249, userfaultfd=323, io_uring_setup=425,
                   perf_event_open=298, ptrace=101, mount=165, umount2=166,
                   open_by_handle_at=304, process_vm_readv=310),
    "aarch64": dict(unshare=97, setns=268, clone=220, clone3=435, bpf=280, keyctl=219,
                    add_key=217, request_key=218, userfaultfd=282, io_uring_setup=425,
                    perf_event_open=241, ptrace=117, mount=40, umount2=39,
                    open_by_handle_at=265, process_vm_readv=270),
}[platform.machine()]
ARGS = dict(
    unshare=(0,), setns=(-1, 0), clone=(0x10000000 | 17, 0, 0, 0, 0), clone3=(0, 0),
    bpf=(5, 0, 0), keyctl=(0, -3, 0), add_key=(0, 0, 0, 0, 0), request_key=(0, 0, 0, 0),
    userfaultfd=(1,), io_uring_setup=(1, 0), perf_event_open=(0, 0, -1, -1, 0),
    ptrace=(0, 0, 0, 0), mount=(0, 0, 0, 0, 0), umount2=(b"/proc", 0),
    open_by_handle_at=(-1, 0, 0), process_vm_readv=(1, 0, 0, 0, 0, 0),
)
out = {}
for name, nr in NR.items():
    args = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in ARGS[name]]
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *args)
    if name == "clone" and rc == 0:
        os._exit(0)  # the child of an allowed clone: only the parent reports
    if name == "clone" and rc > 0:
        os.waitpid(rc, 0)
    out[name] = ctypes.get_errno() if rc == -1 else 0
print(json.dumps(out))
"""

#: Ordinary things a build or a test suite does must keep working under the filter.
ORDINARY = r"""
import multiprocessing, subprocess, threading, json, os, sys
def square(x):
    return x * x
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        squares = sum(pool.map(square, range(10)))
    box = []
    t = threading.Thread(target=box.append, args=(1,)); t.start(); t.join()
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.split()[0]
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"pool": squares, "thread": box, "git": git, "fork": forked}))
"""

#: Capabilities and identity inside.
IDENTITY = r"""
import json, os
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "CapEff": status["CapEff"].strip(),
                  "CapBnd": status["CapBnd"].strip(), "NoNewPrivs": status["NoNewPrivs"].strip(),
                  "Seccomp": status["Seccomp"].strip()}))
"""
