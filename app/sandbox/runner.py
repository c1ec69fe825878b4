"""Run one repository command (setup, reproduce, test, a CLI agent) in the sandbox.

What the sandbox promises (the isolation itself is the rest of :mod:`app.sandbox`):

- Isolation: own PID, mount, network, IPC and UTS namespaces; only the
  workspace is writable and nothing of the worker is visible; an
  unprivileged user that is not the worker's (:mod:`app.sandbox.userns`
  when the worker is not root; the workspace is the worker's again after
  the command). When no sandbox can be built the command does not run
  (:class:`~app.sandbox.SandboxUnavailable`, a permanent error), unless the
  operator set ``REPAIRBOT_SANDBOX=none``.
- Environment: built from an allow-list, never inherited. Only ``PATH``,
  ``LANG`` and ``LC_ALL`` are read from the worker; ``HOME`` and ``TMPDIR``
  point at directories of the workspace; anything else must be passed
  explicitly. The app's secrets (tokens, keys, database URLs) are therefore
  absent, and the few names that must never reach a command are refused
  even as explicit extras.
- Network: a namespace of its own, always (a loopback and nothing else).
  A command the caller lets use the network (``network=True``) reaches the
  operator's allow-listed hosts through the egress proxy outside the
  sandbox (:mod:`app.sandbox.egress`) and nothing else; the result records
  which.
- Time: a wall-clock limit. On timeout or cancellation the sandbox's PID
  namespace is torn down, so every process the command started dies with
  it (a ``setsid`` daemon included), not only the process group.
- Output: stdout and stderr interleaved into one stream; the first and last
  bytes are kept up to a cap, the total is counted, truncation is recorded.
- Resources: a cgroup per command (memory, number of tasks) where the host
  allows, and ``setrlimit`` in any case (CPU seconds, address space, file
  size, processes, open files, no core dumps).
- Liveness: an async heartbeat callback is awaited every few seconds with
  progress; if it answers True (cancellation requested) the sandbox is torn
  down and :class:`ActivityCancelled` raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from app.engine import ActivityCancelled
from app.repo_config import Command
from app.sandbox import Isolation, Launch, SandboxUnavailable, prepare
from app.sandbox.egress import EgressPolicy, egress, proxy_env
from app.sandbox.forward import PortForward
from app.sandbox.hold import GO, Rlimit
from app.sandbox.mounts import plan, shows
from app.sandbox.quota import DiskQuota, QuotaWatch

log = logging.getLogger("repairbot.sandbox")

Heartbeat = Callable[[dict[str, Any]], Awaitable[bool]]

#: Names that never reach a command, even when a caller passes them on purpose.
FORBIDDEN_ENV = frozenset(
    {
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_PRIVATE_KEY",
        "GITHUB_PRIVATE_KEY_FILE",
        "GITHUB_WEBHOOK_SECRET",
        "DATABASE_URL",
        "REDIS_URL",
    }
)

_GiB = 1024**3


@dataclass(frozen=True, kw_only=True)
class ResourceLimits:
    """Per-process limits applied with ``setrlimit`` (``None`` = leave as is).

    Address space is generous because runtimes (JVM, Go, Node) reserve far
    more virtual memory than they touch. ``processes`` is the kernel's
    per-user count (RLIMIT_NPROC): it bounds fork bombs, and is not enforced
    for root.
    """

    cpu_seconds: int | None = 1800
    address_space_bytes: int | None = 8 * _GiB
    file_size_bytes: int | None = 2 * _GiB
    processes: int | None = 4096
    open_files: int | None = 4096
    core_file_bytes: int | None = 0
    #: Memory of the whole command tree together (cgroup; where cgroups are
    #: unavailable only the per-process address-space limit applies).
    memory_bytes: int | None = 4 * _GiB
    #: Tasks (processes and threads) of the whole command tree (cgroup
    #: ``pids.max``): stops a fork bomb whatever the user id.
    tasks: int | None = 1024
    #: What the writable paths may hold together, enforced while the command
    #: runs (:mod:`app.sandbox.quota`); also caps every single file.
    disk_quota: DiskQuota | None = field(default_factory=lambda: DiskQuota(bytes=4 * _GiB))
    #: Size of each of the sandbox's own tmpfs (``/tmp``, ``/dev/shm``): memory.
    tmpfs_bytes: int | None = 512 * 1024 * 1024

    @property
    def quota_bytes(self) -> int | None:
        return self.disk_quota.bytes if self.disk_quota is not None else None

    @property
    def file_size_limit(self) -> int | None:
        """``RLIMIT_FSIZE``: no single file may outgrow the disk quota either."""
        known = [size for size in (self.file_size_bytes, self.quota_bytes) if size is not None]
        return min(known) if known else None

    def rlimits(self) -> tuple[Rlimit, ...]:
        """What to lower in the command's process (:mod:`app.sandbox.hold`)."""
        return tuple(
            (kind, value)
            for kind, value in (
                (resource.RLIMIT_CPU, self.cpu_seconds),
                (resource.RLIMIT_AS, self.address_space_bytes),
                (resource.RLIMIT_FSIZE, self.file_size_limit),
                (resource.RLIMIT_NPROC, self.processes),
                (resource.RLIMIT_NOFILE, self.open_files),
                (resource.RLIMIT_CORE, self.core_file_bytes),
            )
            if value is not None
        )


@dataclass(frozen=True, kw_only=True)
class OutputLimits:
    """How much output is kept: for evidence, and for the small excerpt in history."""

    #: Bytes kept from the start and from the end of the output (evidence).
    head_bytes: int = 1024 * 1024
    tail_bytes: int = 1024 * 1024
    #: Bytes of each end quoted in :class:`CommandResult` (goes into history).
    excerpt_head_bytes: int = 1024
    excerpt_tail_bytes: int = 4096


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """Everything about how commands run that is not the command itself."""

    limits: ResourceLimits = field(default_factory=ResourceLimits)
    output: OutputLimits = field(default_factory=OutputLimits)
    #: Which namespaces and what is visible (the operator's choice, ``auto`` by default).
    isolation: Isolation = field(default_factory=Isolation)
    #: Seconds between heartbeats while a command runs.
    heartbeat_interval: float = 10.0
    #: Where a networked command may connect, through the egress proxy
    #: (``REPAIRBOT_EGRESS_ALLOW``; :mod:`app.sandbox.egress`).
    egress: EgressPolicy = field(default_factory=EgressPolicy)


class CommandResult(BaseModel):
    """What is recorded about a finished command (small: history holds it)."""

    model_config = ConfigDict(frozen=True)

    command: Command
    #: The process's exit status; negative is the signal that ended it.
    exit_code: int
    duration_seconds: float
    timed_out: bool
    total_bytes: int
    truncated: bool
    output_head: str
    output_tail: str
    #: The sandbox it ran in: ``bwrap`` or ``none`` (the operator disabled it).
    sandbox: str = "none"
    #: Whether it could reach the allow-listed hosts through the egress proxy
    #: (base setup commands, when the config allows).
    network: bool = False
    #: Why the disk quota stopped it ("the workspace exceeded its N MiB disk
    #: quota"), or None. Such a command was killed (or died of SIGXFSZ), so it
    #: never passed, and it never showed the bug either.
    quota_exceeded: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when None: results recorded before the field existed are
        # part of later activities' inputs, whose hashes replay compares.
        data: dict[str, Any] = handler(self)
        if data.get("quota_exceeded", "") is None:
            del data["quota_exceeded"]
        return data

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class CommandRun:
    result: CommandResult
    #: The capped output (head, an omission marker, tail), for the evidence store.
    output: bytes


def scrubbed_env(
    *,
    home: Path,
    tmpdir: Path,
    extra: Mapping[str, str] | None = None,
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment a command sees; nothing else leaks from ``parent``."""
    parent = os.environ if parent is None else parent
    env = {
        "PATH": parent.get("PATH") or os.defpath,
        "HOME": str(home),
        "TMPDIR": str(tmpdir),
        "LANG": parent.get("LANG") or "C.UTF-8",
        "LC_ALL": parent.get("LC_ALL") or "C.UTF-8",
        # Never let git block on a credential prompt; there is no terminal.
        "GIT_TERMINAL_PROMPT": "0",
    }
    for name, value in (extra or {}).items():
        if name in FORBIDDEN_ENV:
            raise ValueError(f"{name} must never be passed to a repository command")
        env[name] = value
    return env


class _Capture:
    """Keeps the first and last bytes of a stream and counts the rest.

    The tail is a queue of chunks trimmed from the front, so a command that
    prints gigabytes costs a pop per chunk, not a copy of the whole tail.
    """

    def __init__(self, head_limit: int, tail_limit: int) -> None:
        self.head = bytearray()
        self.total = 0
        self._head_limit = head_limit
        self._tail_limit = tail_limit
        self._tail: deque[bytes] = deque()
        self._tail_size = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self._tail_limit <= 0:
            return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size - len(self._tail[0]) >= self._tail_limit:
            self._tail_size -= len(self._tail.popleft())

    @property
    def tail(self) -> bytes:
        joined = b"".join(self._tail)
        return joined[max(0, len(joined) - self._tail_limit) :]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + min(self._tail_size, self._tail_limit)

    def captured(self) -> bytes:
        tail = self.tail
        if not self.truncated:
            return bytes(self.head) + tail
        omitted = self.total - len(self.head) - len(tail)
        marker = f"\n\n[... {omitted} bytes omitted by repairbot ...]\n\n".encode()
        return bytes(self.head) + marker + tail

    def excerpts(self, head: int, tail: int) -> tuple[str, str]:
        """The last ``tail`` bytes (where errors are), and before them up to
        ``head`` bytes from the start that the tail does not already hold."""
        kept_tail = self.tail
        end_size = min(tail, self.total)
        source = kept_tail if len(kept_tail) >= end_size else bytes(self.head) + kept_tail
        end = source[len(source) - end_size :]
        start = bytes(self.head[: min(head, self.total - end_size)])
        return start.decode(errors="replace"), end.decode(errors="replace")


class _Protocol(asyncio.SubprocessProtocol):
    """Feeds output to a capture; tells when the child exits and when its pipes close.

    The two are separate events: a command may exit while a child it left
    behind still holds the pipe, and we must not wait for that child.
    """

    def __init__(self, capture: _Capture, loop: asyncio.AbstractEventLoop) -> None:
        self.capture = capture
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.capture.feed(data.encode() if isinstance(data, str) else data)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def run_command(
    command: Command,
    *,
    cwd: Path,
    home: Path,
    tmpdir: Path,
    time_limit: float,
    extra_env: Mapping[str, str] | None = None,
    sandbox: Sandbox | None = None,
    heartbeat: Heartbeat | None = None,
    writable: Sequence[Path] = (),
    network: bool = False,
    forwards: Sequence[PortForward] = (),
) -> CommandRun:
    """Run ``command`` in ``cwd`` and return what happened.

    ``cwd``, ``home``, ``tmpdir`` and ``writable`` are the only paths the
    command may write (they must lie in the workspace); ``network`` lets it
    reach ``sandbox.egress``'s allow-list through the egress proxy (never the
    host's network). ``forwards`` make servers outside reachable inside as
    ``127.0.0.1:PORT`` (:mod:`app.sandbox.forward`). A non-zero exit or a
    timeout is a result, not an exception. Raises
    :class:`~app.sandbox.SandboxUnavailable` (nothing ran) when no sandbox
    can be built, :class:`ActivityCancelled` if ``heartbeat`` reports
    cancellation, and re-raises whatever ``heartbeat`` raises (a lost
    lease); in every case everything the command started is dead before this
    returns or raises.
    """
    sandbox = sandbox or Sandbox()
    _make_dirs(home, tmpdir)
    env = scrubbed_env(home=home, tmpdir=tmpdir, extra=extra_env)
    argv = command.to_argv()
    missing = _missing_program(argv[0], cwd=cwd, path=env["PATH"])
    if missing is not None:
        return _not_started(command, missing, 127)
    writable = _unique([cwd, home, tmpdir, *writable])
    if not _shown_in_sandbox(argv[0], sandbox.isolation, writable, cwd=cwd, path=env["PATH"]):
        return _not_started(command, _HIDDEN, 127)
    if not network or sandbox.isolation.mode == "none":
        # Unsandboxed (the operator's choice) means the host's network anyway.
        return await _launch(
            command, argv, cwd, env, writable, forwards, sandbox, time_limit, network, heartbeat
        )
    async with egress(sandbox.egress) as (proxy, forward):
        env |= proxy_env(forward.port)
        run = await _launch(
            command,
            argv,
            cwd,
            env,
            writable,
            [*forwards, forward],
            sandbox,
            time_limit,
            network,
            heartbeat,
        )
    return _with_refusals(run, proxy.refused)


#: Refusals listed under a command's output, at most (a loop could make thousands).
_REFUSALS_SHOWN = 20


def _with_refusals(run: CommandRun, refused: Sequence[str]) -> CommandRun:
    """The egress proxy's refusals appended to the output: a package manager
    seldom prints the 403's body, and the maintainer must learn which host to
    ask the operator for."""
    if not refused:
        return run
    lines = [f"[repairbot egress refused: {reason}]" for reason in refused[:_REFUSALS_SHOWN]]
    if len(refused) > _REFUSALS_SHOWN:
        lines.append(f"[... and {len(refused) - _REFUSALS_SHOWN} more refusals]")
    note = "\n" + "\n".join(lines) + "\n"
    result = run.result.model_copy(update={"output_tail": run.result.output_tail + note})
    return CommandRun(result=result, output=run.output + note.encode())


async def _launch(
    command: Command,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    writable: list[Path],
    forwards: Sequence[PortForward],
    sandbox: Sandbox,
    time_limit: float,
    network: bool,
    heartbeat: Heartbeat | None,
) -> CommandRun:
    launch = await asyncio.to_thread(
        prepare,
        sandbox.isolation,
        argv,
        cwd=cwd,
        writable=writable,
        forwards=forwards,
        memory_bytes=sandbox.limits.memory_bytes,
        max_tasks=sandbox.limits.tasks,
        rlimits=sandbox.limits.rlimits(),
        tmpfs_bytes=sandbox.limits.tmpfs_bytes,
    )
    try:
        return await _run(
            command, launch, cwd, env, writable, time_limit, network, sandbox, heartbeat
        )
    finally:
        problem = await asyncio.to_thread(launch.cleanup)
        if problem is not None:
            # The workspace stays the sandbox user's; the next attempt builds a new one.
            log.warning("%s", problem)


async def _run(
    command: Command,
    launch: Launch,
    cwd: Path,
    env: dict[str, str],
    writable: Sequence[Path],
    time_limit: float,
    network: bool,
    sandbox: Sandbox,
    heartbeat: Heartbeat | None,
) -> CommandRun:
    capture = _Capture(sandbox.output.head_bytes, sandbox.output.tail_bytes)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(capture, loop),
            *launch.argv,
            cwd=cwd,
            env=env,
            # The held shell's go-ahead (app.sandbox.hold); the command's
            # own stdin is /dev/null.
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=launch.pass_fds,
        )
    except (FileNotFoundError, PermissionError) as exc:
        # What a shell would report (127 / 126): the repository's command is
        # wrong, which is a result to show, not an infrastructure failure.
        return _not_started(command, exc, 127 if isinstance(exc, FileNotFoundError) else 126)
    await _let_go(launch, transport, protocol)
    quota = sandbox.limits.disk_quota
    watch = None
    if quota is not None:
        watch = QuotaWatch(writable, quota, userns=launch.userns)
    timed_out = False
    try:
        if watch is not None:
            watch.start()
        ending = await _supervise(
            protocol.exited,
            stop=watch.exceeded if watch is not None else None,
            deadline=started + time_limit,
            interval=sandbox.heartbeat_interval,
            heartbeat=heartbeat,
            progress=lambda: {
                "command": command.display(),
                "elapsed_seconds": round(time.monotonic() - started, 1),
                "output_bytes": capture.total,
            },
        )
        timed_out = ending == "timed-out"
    finally:
        if watch is not None:
            await watch.stop()
        # Always: a command that exited may have left children behind, and an
        # exception (cancellation, lost lease) must not leave anything running.
        _kill_group(transport.get_pid())
        if launch.cgroup is not None:
            launch.cgroup.kill_all()  # a daemon that left the group (setsid), too
        await _settle(transport, protocol)
    exit_code = transport.get_returncode()
    assert exit_code is not None
    if launch.backend == "bwrap" and 128 < exit_code <= 128 + 64:
        # bwrap reports a command killed by signal N as 128 + N, like a shell.
        exit_code = 128 - exit_code
    over_quota = _over_quota(watch, exit_code, quota)
    if over_quota is not None:
        capture.feed(f"\n[repairbot: stopped: {over_quota}]\n".encode())
    head, tail = capture.excerpts(
        sandbox.output.excerpt_head_bytes, sandbox.output.excerpt_tail_bytes
    )
    result = CommandResult(
        command=command,
        exit_code=exit_code,
        duration_seconds=round(time.monotonic() - started, 3),
        timed_out=timed_out,
        total_bytes=capture.total,
        truncated=capture.truncated,
        output_head=head,
        output_tail=tail,
        sandbox=launch.backend,
        network=network,
        quota_exceeded=over_quota,
    )
    return CommandRun(result=result, output=capture.captured())


async def _let_go(
    launch: Launch, transport: asyncio.SubprocessTransport, protocol: _Protocol
) -> None:
    """Limit the held child, then let it run; when limiting fails it never
    runs (the pipe closes unwritten) and SandboxUnavailable says why."""
    go = transport.get_pipe_transport(0)
    assert isinstance(go, asyncio.WriteTransport)
    try:
        launch.limit(transport.get_pid())
    except BaseException as exc:
        go.close()
        _kill_group(transport.get_pid())
        await _settle(transport, protocol)
        if isinstance(exc, OSError):
            raise SandboxUnavailable(
                f"could not put the command under its limits ({exc}). Repository code was not run."
            ) from exc
        raise
    go.write(GO)
    go.close()


def _over_quota(watch: QuotaWatch | None, exit_code: int, quota: DiskQuota | None) -> str | None:
    """Why the disk quota ended the command, or None: the watcher found the
    workspace over it (and killed the command, unless it had ended first),
    or the command died of SIGXFSZ (a file grew past ``RLIMIT_FSIZE``, which
    is never above the quota), directly or as a shell reports its child's."""
    if watch is not None and watch.reason is not None:
        return watch.reason
    if quota is not None and exit_code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return quota.bytes_message()
    return None


def _missing_program(program: str, *, cwd: Path, path: str) -> OSError | None:
    """Why ``program`` cannot be found (as a shell would say), or None.

    Checked before the sandbox starts so that a wrong command reads the same
    (exit 127) with any backend; the sandbox shows the same paths.
    """
    if "/" in program:
        found = (cwd / program).exists()
    else:
        found = shutil.which(program, path=path) is not None
    if found:
        return None
    return FileNotFoundError(2, "No such file or directory", program)


#: A program the worker's PATH finds but the sandbox does not show.
_HIDDEN = FileNotFoundError(2, "it is not available inside the sandbox")


def _shown_in_sandbox(
    program: str, isolation: Isolation, writable: Sequence[Path], *, cwd: Path, path: str
) -> bool:
    """Whether the program the worker finds is visible inside the sandbox.

    Without this a program under, say, the worker's ``~/.local/bin`` makes
    bubblewrap exit 1 ("execvp: No such file"), which would read as the
    command failing, i.e. as a reproduced bug.
    """
    if isolation.mode == "none":
        return True
    found = str(cwd / program) if "/" in program else shutil.which(program, path=path)
    return found is None or shows(plan(isolation, writable), Path(found))


def _unique(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path not in out:
            out.append(path)
    return out


def _not_started(command: Command, exc: OSError, code: int) -> CommandRun:
    if exc is _HIDDEN:
        message = f"repairbot: `{command.to_argv()[0]}` is not available inside the sandbox\n"
    else:
        message = f"repairbot: cannot run {command.to_argv()[0]!r}: {exc.strerror}\n"
    result = CommandResult(
        command=command,
        exit_code=code,
        duration_seconds=0.0,
        timed_out=False,
        total_bytes=len(message),
        truncated=False,
        output_head=message,
        output_tail="",
    )
    return CommandRun(result=result, output=message.encode())


Ending = Literal["exited", "timed-out", "quota"]


async def _supervise(
    exited: asyncio.Future[None],
    *,
    stop: asyncio.Event | None,
    deadline: float,
    interval: float,
    heartbeat: Heartbeat | None,
    progress: Callable[[], dict[str, Any]],
) -> Ending:
    """Wait for exit, the time limit, or ``stop`` (the disk quota); heartbeat meanwhile."""
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timed-out"
            waited: set[asyncio.Future[Any]] = {exited} if stopped is None else {exited, stopped}
            done, _ = await asyncio.wait(
                waited, timeout=min(interval, remaining), return_when=asyncio.FIRST_COMPLETED
            )
            if exited in done:
                return "exited"
            if stopped is not None and stopped in done:
                return "quota"
            if heartbeat is not None and await heartbeat(progress()):
                raise ActivityCancelled("cancellation requested while a command was running")
    finally:
        if stopped is not None:
            stopped.cancel()


def _make_dirs(*directories: Path) -> None:
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


#: How long to wait for the output pipe to close after the command exited.
_DRAIN_GRACE = 2.0


async def _settle(transport: asyncio.SubprocessTransport, protocol: _Protocol) -> None:
    # Shielded so a cancelled caller still reaps the child (no zombies).
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(protocol.exited)
    # A grandchild that escaped into its own session (setsid) survives the
    # group kill and may hold the pipe open: stop reading after a grace period.
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(protocol.closed), _DRAIN_GRACE)
    transport.close()
