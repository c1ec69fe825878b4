"""A held command (app.sandbox.hold): nothing runs before the go-ahead, the
limits set while it waits are the ones it runs under, and a hold that is
never let go ends without running anything."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from app.sandbox.cgroups import CommandCgroup
from app.sandbox.hold import GO, HOLD, limit

PY = sys.executable


def held(*argv: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*HOLD, *argv], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def let_go(process: subprocess.Popen[bytes]) -> bytes:
    out, _ = process.communicate(GO, timeout=30)
    return out


def test_a_hold_never_let_go_runs_nothing(tmp_path: Path) -> None:
    process = held("/bin/sh", "-c", "echo ran > marker", cwd=tmp_path)
    out, _ = process.communicate(b"", timeout=30)  # the pipe closes unwritten
    assert process.returncode != 0
    assert not (tmp_path / "marker").exists()
    assert out == b""


def test_a_command_let_go_runs_with_its_stdin_on_dev_null(tmp_path: Path) -> None:
    process = held("/bin/sh", "-c", "readlink /proc/self/fd/0; cat", cwd=tmp_path)
    assert let_go(process) == b"/dev/null\n"
    assert process.returncode == 0


def test_the_argv_is_handed_on_as_it_is(tmp_path: Path) -> None:
    tricky = ["$(touch pwned)", "a b", "'", '"', "*", ";", "--", ""]
    process = held(PY, "-c", "import sys; print(sys.argv[1:])", *tricky, cwd=tmp_path)
    assert let_go(process).decode().strip() == repr(tricky)
    assert not (tmp_path / "pwned").exists()


def test_limits_set_while_held_are_the_commands(tmp_path: Path) -> None:
    group = CommandCgroup(memory=tmp_path / "memory", pids=tmp_path / "pids")
    for directory in (group.memory, group.pids):
        directory.mkdir()
        (directory / "cgroup.procs").write_text("")
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_CORE))"
    process = held(PY, "-c", code, cwd=tmp_path)
    limit(process.pid, group, [(resource.RLIMIT_NOFILE, 99), (resource.RLIMIT_CORE, 0)])
    assert let_go(process).decode().strip() == "(99, 99) (0, 0)"
    for directory in (group.memory, group.pids):
        assert (directory / "cgroup.procs").read_text() == str(process.pid)


def test_a_limit_is_never_asked_above_the_inherited_hard_limit(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard != resource.RLIM_INFINITY
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE))"
    process = held(PY, "-c", code, cwd=tmp_path)
    limit(process.pid, None, [(resource.RLIMIT_NOFILE, hard + 1000)])
    assert let_go(process).decode().strip() == str((hard, hard))
