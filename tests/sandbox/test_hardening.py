"""Inside the sandbox: no new namespaces, no kernel attack surface, no capability.

And ordinary work (multiprocessing, threads, fork, git, pip) still works.

Real sandboxes (each backend), as the root worker runs them; the same checks
as an unprivileged worker are in tests/sandbox/test_unprivileged.py.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from app.repo_config import Command
from app.sandbox import Isolation
from app.sandbox.runner import CommandRun, Sandbox, run_command
from app.sandbox.seccomp import ARCHES, CLONE_NEW_FLAGS, SeccompUnsupported, program
from tests.sandbox import probes

PY = sys.executable
DENIED = {
    "unshare": errno.EPERM,
    "setns": errno.EPERM,
    "clone": errno.EPERM,  # with CLONE_NEWUSER
    "clone3": errno.ENOSYS,  # libc falls back to clone
    "bpf": errno.EPERM,
    "keyctl": errno.EPERM,
    "add_key": errno.EPERM,
    "request_key": errno.EPERM,
    "userfaultfd": errno.EPERM,
    "io_uring_setup": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "ptrace": errno.EPERM,
    "mount": errno.EPERM,
    "umount2": errno.EPERM,
    "open_by_handle_at": errno.EPERM,
    "process_vm_readv": errno.EPERM,
}


@pytest.fixture(params=["bwrap", "unshare"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox(isolation=Isolation(mode=request.param), heartbeat_interval=0.1)


async def run(tmp_path: Path, sandbox: Sandbox, command: Command) -> CommandRun:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return await run_command(
        command, cwd=ws, home=ws / ".home", tmpdir=ws / ".tmp", time_limit=60, sandbox=sandbox
    )


def last_json(out: CommandRun) -> Any:
    assert out.result.exit_code == 0, out.output
    return json.loads(out.output.decode().strip().splitlines()[-1])


async def test_the_seccomp_filter_denies_the_kernel_attack_surface(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    got = last_json(await run(tmp_path, sandbox, Command(argv=[PY, "-c", probes.SYSCALLS])))
    assert got == DENIED


async def test_the_filter_is_what_denies_them(tmp_path: Path) -> None:
    """The control: unsandboxed, the probe gets other answers (so EPERM above is the filter)."""
    got = last_json(
        await run(
            tmp_path,
            Sandbox(isolation=Isolation(mode="none")),
            Command(argv=[PY, "-c", probes.SYSCALLS]),
        )
    )
    assert got["unshare"] == 0 and got["ptrace"] == 0 and got["keyctl"] != errno.EPERM
    assert got["clone3"] != errno.ENOSYS


async def test_no_nested_user_namespace(tmp_path: Path, sandbox: Sandbox) -> None:
    code = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.unshare(0x10000000), ctypes.get_errno())"
    )
    out = await run(
        tmp_path, sandbox, Command(shell=f"unshare -U true; echo rc=$?; {PY} -c '{code}'")
    )
    assert b"rc=1" in out.output and out.output.split()[-2:] == [b"-1", b"1"], out.output


async def test_ordinary_work_still_works(tmp_path: Path, sandbox: Sandbox) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "ordinary.py").write_text(probes.ORDINARY)
    got = last_json(await run(tmp_path, sandbox, Command(argv=[PY, "ordinary.py"])))
    assert got == {"pool": 285, "thread": [1], "git": "git", "fork": 7}
    pip = await run(tmp_path, sandbox, Command(argv=[PY, "-m", "pip", "--version"]))
    assert pip.result.exit_code == 0 and pip.output.startswith(b"pip "), pip.output


async def test_no_capability_no_new_privileges_and_a_distinct_user(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    got = last_json(await run(tmp_path, sandbox, Command(argv=[PY, "-c", probes.IDENTITY])))
    assert got == {
        "uid": 65534,
        "gid": 65534,
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }


def test_the_program_is_built_per_architecture() -> None:
    for machine in ARCHES:
        code = program(machine)
        assert len(code) % 8 == 0 and 8 < len(code) // 8 < 256
    assert CLONE_NEW_FLAGS & 0x10000000  # CLONE_NEWUSER
    with pytest.raises(SeccompUnsupported, match="no seccomp filter for riscv64"):
        program("riscv64")
