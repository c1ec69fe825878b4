"""Running repository commands: real subprocesses, real limits, real signals."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine._errors import ActivityCancelled, StaleLease
from app.repo_config import Command
from app.sandbox import SandboxUnavailable, hold
from app.sandbox.runner import (
    CommandRun,
    OutputLimits,
    ResourceLimits,
    Sandbox,
    _Capture,
    run_command,
    scrubbed_env,
)
from tests.processes import alive

PY = sys.executable
FAST = Sandbox(heartbeat_interval=0.05)


async def run(tmp_path: Path, command: Command, **kwargs: Any) -> CommandRun:
    kwargs.setdefault("time_limit", 10)
    kwargs.setdefault("sandbox", FAST)
    return await run_command(
        command, cwd=tmp_path, home=tmp_path / ".home", tmpdir=tmp_path / ".tmp", **kwargs
    )


def sleeper() -> str:
    """A ``sleep`` argument no other process on the host has: the command's
    processes live in their own PID namespace, so they are found by it."""
    return f"{600 + secrets.randbelow(10**6)}.{os.getpid()}"


def running_with(marker: str) -> list[int]:
    """Host pids (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def wait_gone(marker: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while running_with(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_exit_code_duration_and_interleaved_output(tmp_path: Path) -> None:
    out = await run(tmp_path, Command(shell="echo one; echo two >&2; echo three; exit 3"))
    result = out.result
    assert (result.exit_code, result.timed_out, result.passed) == (3, False, False)
    assert out.output == b"one\ntwo\nthree\n"
    assert (result.output_tail, result.output_head, result.total_bytes, result.truncated) == (
        "one\ntwo\nthree\n",
        "",
        14,
        False,
    )
    assert 0 <= result.duration_seconds < 5


async def test_argv_commands_run_without_a_shell(tmp_path: Path) -> None:
    out = await run(tmp_path, Command.of(["echo", "$HOME", "&&", "id"]))
    assert out.output == b"$HOME && id\n" and out.result.passed


async def test_the_environment_is_an_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = {
        "GITHUB_TOKEN": "ghs_planted_token",
        "GITHUB_PRIVATE_KEY": "-----BEGIN PLANTED KEY-----",
        "GITHUB_WEBHOOK_SECRET": "planted-webhook-secret",
        "DATABASE_URL": "postgresql://planted",
        "REDIS_URL": "redis://planted",
        "OPENAI_API_KEY": "sk-planted",
        "SOME_UNRELATED_SETTING": "planted-unrelated",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    out = await run(tmp_path, Command.of(["env"]), extra_env={"REPAIRBOT_ATTEMPT": "2"})
    env = dict(line.split("=", 1) for line in out.output.decode().splitlines())
    for value in planted.values():
        assert value not in out.output.decode()
    # PWD is the sandbox's account of the working directory (bwrap sets it).
    assert set(env) - {"PWD"} == {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "GIT_TERMINAL_PROMPT",
        "REPAIRBOT_ATTEMPT",
    }
    assert env["HOME"] == str(tmp_path / ".home") and env["TMPDIR"] == str(tmp_path / ".tmp")
    assert env["PATH"] == os.environ["PATH"]


def test_secrets_are_refused_even_as_explicit_extras(tmp_path: Path) -> None:
    for name in ("GITHUB_TOKEN", "DATABASE_URL", "GITHUB_PRIVATE_KEY"):
        with pytest.raises(ValueError, match=name):
            scrubbed_env(home=tmp_path, tmpdir=tmp_path, extra={name: "x"})
    assert scrubbed_env(home=tmp_path, tmpdir=tmp_path, parent={})["LANG"] == "C.UTF-8"


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    mark = sleeper()
    script = f"sleep {mark} & setsid sleep {mark} & sleep {mark}"
    started = time.monotonic()
    out = await run(tmp_path, Command(shell=script), time_limit=0.5)
    assert out.result.timed_out and not out.result.passed
    assert out.result.exit_code == -signal.SIGKILL
    assert time.monotonic() - started < 5
    assert await wait_gone(mark)


async def test_children_left_behind_by_a_finished_command_are_killed(tmp_path: Path) -> None:
    mark = sleeper()
    started = time.monotonic()
    out = await run(tmp_path, Command(shell=f"sleep {mark} & echo done"))
    assert out.result.passed and out.output == b"done\n"
    assert time.monotonic() - started < 5  # did not wait for the child's open pipe
    assert await wait_gone(mark)


async def test_a_daemon_that_left_the_session_dies_with_the_command(tmp_path: Path) -> None:
    mark = sleeper()
    # Double fork plus setsid, output closed: a classic daemon.
    daemon = f"(setsid sh -c 'sleep {mark}' </dev/null >/dev/null 2>&1 &) ; echo started"
    out = await run(tmp_path, Command(shell=daemon))
    assert out.result.passed and out.output == b"started\n"
    assert await wait_gone(mark)


async def test_output_keeps_head_and_tail_and_counts_the_rest(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('START' + 'x' * 300000 + 'END')"
    limits = OutputLimits(
        head_bytes=1000, tail_bytes=2000, excerpt_head_bytes=10, excerpt_tail_bytes=20
    )
    out = await run(tmp_path, Command.of([PY, "-c", code]), sandbox=Sandbox(output=limits))
    result = out.result
    assert (result.total_bytes, result.truncated) == (300008, True)
    assert out.output.startswith(b"START" + b"x" * 995)
    assert out.output.endswith(b"x" * 1997 + b"END")
    assert b"[... 297008 bytes omitted by repairbot ...]" in out.output
    assert len(out.output) < 3100
    assert (result.output_head, result.output_tail) == ("STARTxxxxx", "x" * 17 + "END")


async def test_file_size_limit(tmp_path: Path) -> None:
    limits = ResourceLimits(file_size_bytes=100_000)
    code = "open('big', 'wb').write(b'0' * 1_000_000)"
    out = await run(tmp_path, Command.of([PY, "-c", code]), sandbox=Sandbox(limits=limits))
    assert not out.result.passed
    assert (tmp_path / "big").stat().st_size <= 100_000


async def test_cpu_limit(tmp_path: Path) -> None:
    limits = ResourceLimits(cpu_seconds=1)
    busy = Command.of([PY, "-c", "while True: pass"])
    out = await run(tmp_path, busy, sandbox=Sandbox(limits=limits), time_limit=60)
    # Killed by the kernel for CPU time, long before the wall-clock limit.
    assert out.result.exit_code in (-signal.SIGXCPU, -signal.SIGKILL)
    assert not out.result.timed_out


async def test_address_space_limit(tmp_path: Path) -> None:
    limits = ResourceLimits(address_space_bytes=512 * 1024**2)
    code = "x = bytearray(2 * 1024**3)"
    out = await run(tmp_path, Command.of([PY, "-c", code]), sandbox=Sandbox(limits=limits))
    assert out.result.exit_code == 1 and b"MemoryError" in out.output


async def test_a_command_that_cannot_be_put_under_its_limits_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_: object) -> None:
        raise PermissionError(13, "Permission denied", "cgroup.procs")

    monkeypatch.setattr(hold, "limit", refused)
    mark = sleeper()
    script = f"touch ran; sleep {mark}"
    with pytest.raises(SandboxUnavailable, match="Repository code was not run"):
        await run(tmp_path, Command(shell=script))
    assert not (tmp_path / "ran").exists()
    assert running_with(mark) == []


async def test_any_failure_to_limit_leaves_no_held_command_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise ValueError("an rlimit out of range")

    monkeypatch.setattr(hold, "limit", broken)
    mark = sleeper()
    with pytest.raises(ValueError, match="out of range"):
        await run(tmp_path, Command(shell=f"touch ran; sleep {mark}"))
    assert not (tmp_path / "ran").exists()
    # The held shell was stopped and reaped too (its argv holds the command's).
    assert running_with(mark) == []


async def test_process_and_file_limits_are_set_in_the_child(tmp_path: Path) -> None:
    # RLIMIT_NPROC is not enforced for root, so check the limit the child got.
    limits = ResourceLimits(processes=77, open_files=99)
    code = (
        "import resource as r; print(r.getrlimit(r.RLIMIT_NPROC), r.getrlimit(r.RLIMIT_NOFILE),"
        " r.getrlimit(r.RLIMIT_CORE))"
    )
    out = await run(tmp_path, Command.of([PY, "-c", code]), sandbox=Sandbox(limits=limits))
    assert out.output.decode().strip() == "(77, 77) (99, 99) (0, 0)"


async def test_heartbeats_carry_progress_while_a_command_runs(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    async def heartbeat(details: dict[str, Any]) -> bool:
        seen.append(details)
        return False

    out = await run(tmp_path, Command(shell="echo hi; sleep 0.4"), heartbeat=heartbeat)
    assert out.result.passed and len(seen) >= 3
    assert seen[-1]["command"] == "echo hi; sleep 0.4" and seen[-1]["output_bytes"] == 3
    assert seen[-1]["elapsed_seconds"] >= seen[0]["elapsed_seconds"]


async def test_cancellation_through_the_heartbeat_kills_the_group(tmp_path: Path) -> None:
    beats = 0

    async def heartbeat(details: dict[str, Any]) -> bool:
        nonlocal beats
        beats += 1
        return beats >= 2

    mark = sleeper()
    with pytest.raises(ActivityCancelled):
        await run(tmp_path, Command(shell=f"sleep {mark} & sleep {mark}"), heartbeat=heartbeat)
    assert await wait_gone(mark)


async def test_a_lost_lease_stops_the_command_and_propagates(tmp_path: Path) -> None:
    async def heartbeat(details: dict[str, Any]) -> bool:
        raise StaleLease("superseded")

    mark = sleeper()
    with pytest.raises(StaleLease):
        await run(tmp_path, Command(shell=f"sleep {mark}"), heartbeat=heartbeat)
    assert await wait_gone(mark)


async def test_cancelling_the_caller_kills_the_command(tmp_path: Path) -> None:
    mark = sleeper()
    task = asyncio.create_task(run(tmp_path, Command(shell=f"echo > started; sleep {mark}")))
    while not running_with(mark):
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_gone(mark)


async def test_a_missing_program_is_reported_like_a_shell_would(tmp_path: Path) -> None:
    missing = await run(tmp_path, Command.of(["/nonexistent/program", "--x"]))
    assert missing.result.exit_code == 127
    assert b"cannot run '/nonexistent/program'" in missing.output
    (tmp_path / "script").write_text("#!/bin/sh\n")
    denied = await run(tmp_path, Command.of([str(tmp_path / "script")]))
    assert denied.result.exit_code == 126
    assert (await run(tmp_path, Command(shell="no-such-program-here"))).result.exit_code == 127


_ASCII_CHUNKS = st.lists(
    st.text(alphabet="abcxyz\n", min_size=1, max_size=50).map(str.encode), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(chunks=_ASCII_CHUNKS, head=st.integers(0, 60), tail=st.integers(0, 60))
def test_capture_keeps_exactly_the_ends(chunks: list[bytes], head: int, tail: int) -> None:
    capture = _Capture(head, tail)
    for chunk in chunks:
        capture.feed(chunk)
    data = b"".join(chunks)
    assert capture.total == len(data) and bytes(capture.head) == data[:head]
    assert capture.tail == (data[head:][-tail:] if tail else b"")
    assert capture.truncated == (len(data) > head + tail)
    if not capture.truncated:
        assert capture.captured() == data
    # Excerpts: the very end of the output, then as much of the start as does not overlap.
    start, end = (part.encode() for part in capture.excerpts(head, tail))
    assert end == data[len(data) - min(tail, len(data)) :]
    assert start == data[: min(head, len(data) - len(end))]
