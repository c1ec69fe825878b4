"""The workspace's disk quota holds while a command runs (issue 19), with each backend.

One test per mechanism (app/sandbox/quota.py): the watcher's byte count
(many small files in $HOME), its entry count (empty files in $TMPDIR),
``RLIMIT_FSIZE`` at the quota (one sparse file), and the size of the
sandbox's own tmpfs (``/tmp``, ``/dev/shm``). Each test fails when its
mechanism alone is removed: the command then runs to its time limit, or
succeeds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import pytest

from app.agent import AgentRequest, CommandAgent
from app.agent.base import ProposalRefused
from app.repo_config import Command
from app.sandbox import Isolation, quota_walk, userns_helper
from app.sandbox.quota import WALKERS, DiskQuota, NamespaceProbe, QuotaWatch, Usage, measure
from app.sandbox.runner import CommandRun, ResourceLimits, Sandbox, run_command
from app.sandbox.userns import UserNamespace
from app.workspace import Workspace
from tests.sandbox.conftest import Worker
from tests.sandbox.namespaces import AS_ROOT, SANDBOX_USER, root_maps

PY = sys.executable
MiB = 1024 * 1024
QUOTA = DiskQuota(bytes=16 * MiB, entries=5_000, interval=0.05)
#: What a stopped command may have written at most: the quota and what a
#: fast writer adds in one polling period, far below the unbounded case.
OVERSHOOT = 200 * MiB


@dataclass
class Place:
    root: Path
    sandbox: Sandbox

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    async def run(self, script: str, *, time_limit: float = 30) -> CommandRun:
        return await run_command(
            Command(shell=script),
            cwd=self.repo,
            home=self.home,
            tmpdir=self.tmp,
            time_limit=time_limit,
            sandbox=self.sandbox,
        )

    def used(self) -> int:
        return sum(f.lstat().st_blocks * 512 for f in self.root.rglob("*"))


def make_place(root: Path, mode: str, limits: ResourceLimits) -> Place:
    for name in ("repo", "home", "tmp"):
        (root / name).mkdir(parents=True)
    isolation = Isolation(mode=mode)  # type: ignore[arg-type]
    return Place(root, Sandbox(isolation=isolation, limits=limits, heartbeat_interval=0.1))


@pytest.fixture(params=["bwrap", "unshare"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    limits = ResourceLimits(disk_quota=QUOTA, tmpfs_bytes=8 * MiB)
    yield make_place(tmp_path / "ws", request.param, limits)


#: Writes 1 MiB files until stopped: each one far below the per-file limit.
FILL_HOME = "i=0; while :; do head -c 1048576 /dev/zero > $HOME/f$i; i=$((i+1)); done"


async def test_many_small_files_are_stopped_at_the_quota(place: Place) -> None:
    run = await place.run(FILL_HOME)
    result = run.result
    assert result.quota_exceeded == "the workspace exceeded its 16 MiB disk quota"
    assert not result.timed_out and not result.passed
    assert b"[repairbot: stopped: the workspace exceeded its 16 MiB disk quota]" in run.output
    assert QUOTA.bytes < place.used() < QUOTA.bytes + OVERSHOOT


async def test_millions_of_empty_files_are_stopped_at_the_entry_quota(place: Place) -> None:
    """No blocks to count: inode exhaustion is stopped by the number of entries."""
    endless = "import itertools\nfor i in itertools.count(): open(f'e{i}', 'w').close()"
    run = await place.run(f'cd "$TMPDIR" && {PY} -c "{endless}"')
    assert run.result.quota_exceeded == (
        "the workspace exceeded its quota of 5000 files and directories"
    )
    assert not run.result.timed_out
    assert len(os.listdir(place.tmp)) < 10 * QUOTA.entries


#: Nests directories past PATH_MAX (relative mkdir and chdir), then fills the
#: bottom with 1 MiB files: a walk by path names could not see them.
FILL_TOO_DEEP = """
import os, time
for _ in range(30):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
for i in range(64):
    with open(f"f{i}", "wb") as out:
        out.write(bytes(1 << 20))
time.sleep(60)
"""


async def test_files_below_a_path_too_long_to_open_do_not_hide(place: Place) -> None:
    run = await place.run(f"cd \"$HOME\" && {PY} -c '{FILL_TOO_DEEP}'")
    assert run.result.quota_exceeded == (
        "the workspace holds a path too long for its disk quota to be measured"
    ), run.output
    assert not run.result.timed_out


async def test_one_sparse_file_cannot_grow_past_the_quota(place: Place) -> None:
    """A sparse file uses no blocks the watcher could see; RLIMIT_FSIZE refuses it."""
    run = await place.run('truncate -s 1G "$HOME/sparse"')
    assert run.result.quota_exceeded == "the workspace exceeded its 16 MiB disk quota"
    sparse = place.home / "sparse"
    assert not sparse.exists() or sparse.stat().st_size <= QUOTA.bytes


async def test_one_big_file_stops_at_the_quota(place: Place) -> None:
    run = await place.run(f"{PY} -c \"open('big', 'wb').write(bytes(64 * {MiB}))\"")
    assert not run.result.passed
    assert b"File too large" in run.output
    assert (place.repo / "big").stat().st_size <= QUOTA.bytes


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
async def test_the_sandboxs_own_tmpfs_are_size_limited(place: Place, where: str) -> None:
    """Memory, not the workspace: ENOSPC at the size, the command learns it."""
    run = await place.run(f"head -c {16 * MiB} /dev/zero > {where}/fill; echo status=$?")
    assert run.result.exit_code == 0
    assert b"No space left on device" in run.output
    assert b"status=1" in run.output


async def test_other_commands_run_on_while_one_is_stopped(place: Place, tmp_path: Path) -> None:
    """A neighbour in another workspace, started at the same time, is untouched."""
    other = make_place(tmp_path / "other", place.sandbox.isolation.mode, place.sandbox.limits)
    steady = f"{PY} -c \"import time; open('out', 'wb').write(bytes({MiB})); time.sleep(1)\""
    filler, neighbour = await asyncio.gather(place.run(FILL_HOME), other.run(steady))
    assert filler.result.quota_exceeded is not None
    assert neighbour.result.passed, neighbour.output
    assert neighbour.result.quota_exceeded is None


async def test_a_command_agent_stopped_at_the_quota_is_refused_at_once(
    worker: Worker, workspace: Workspace
) -> None:
    """Not "exited with status -9" and retried: what it left is refused with the reason."""
    sandbox = replace(worker.sandbox, limits=ResourceLimits(disk_quota=QUOTA))
    agent = CommandAgent(Command(shell=FILL_HOME), time_limit=60, sandbox=sandbox)
    request = AgentRequest(
        workspace=workspace,
        issue_title="t",
        issue_body="b",
        reproduction=["true"],
        reproduction_output="",
    )
    with pytest.raises(ProposalRefused) as refused:
        await agent.propose(request)
    assert refused.value.message == (
        "the agent was stopped: the workspace exceeded its 16 MiB disk quota"
    )
    assert not refused.value.retryable


async def test_a_command_within_its_quota_is_not_touched(place: Place) -> None:
    run = await place.run(f"head -c {4 * MiB} /dev/zero > $HOME/small && ls $HOME")
    assert run.result.passed, run.output
    assert run.result.quota_exceeded is None


async def test_without_a_quota_nothing_is_watched(tmp_path: Path) -> None:
    """The control: the same filler with the quota off runs to its time limit."""
    limits = replace(ResourceLimits(), disk_quota=None)
    place = make_place(tmp_path / "ws", "bwrap", limits)
    bounded = "i=0; while [ $i -lt 40 ]; do head -c 1048576 /dev/zero > $HOME/f$i; i=$((i+1)); done"
    run = await place.run(bounded)
    assert run.result.passed and run.result.quota_exceeded is None


def test_measure_counts_blocks_and_entries_never_following_links(tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "big").write_bytes(bytes(4 * MiB))
    (inside / "sub").mkdir()
    (inside / "sub" / "data").write_bytes(bytes(MiB))
    os.link(inside / "sub" / "data", inside / "again")  # one file, two names
    (inside / "link").symlink_to(outside)
    # Writable paths nest ($HOME inside the checkout, say): each tree once.
    usage = measure([inside, inside / "sub"], DiskQuota(bytes=1 << 40))
    assert MiB <= usage.bytes < 2 * MiB
    assert usage.entries == 4


async def test_the_watcher_reports_the_first_limit_passed(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"e{i}").touch()
    watch = QuotaWatch([tmp_path], DiskQuota(bytes=1 << 40, entries=10, interval=0.01))
    watch.start()
    await asyncio.wait_for(watch.exceeded.wait(), 10)
    await watch.stop()
    assert watch.reason == "the workspace exceeded its quota of 10 files and directories"


async def _watch_past_a_mib(tmp_path: Path) -> None:
    """A watch of ``tmp_path`` under a 1 MiB quota, with 2 MiB written: started,
    awaited until it says the quota is exceeded, and stopped."""
    (tmp_path / "big").write_bytes(bytes(2 * MiB))
    watch = QuotaWatch([tmp_path], DiskQuota(bytes=MiB, interval=0.01))
    watch.start()
    try:
        await asyncio.wait_for(watch.exceeded.wait(), 10)
    finally:
        await watch.stop()


async def test_the_watcher_needs_no_thread_of_the_default_executor(tmp_path: Path) -> None:
    """Every thread of the loop's executor busy (other commands starting and
    cleaning up), the watcher still measures on its own thread."""
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(executor)
    busy = threading.Event()
    blocked = loop.run_in_executor(None, busy.wait)
    try:
        await _watch_past_a_mib(tmp_path)
    finally:
        busy.set()
        await blocked
        executor.shutdown()


async def test_the_next_command_watches_on_the_thread_the_last_one_gave_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch's thread is kept for the next command: no thread per command."""
    first = QuotaWatch([tmp_path], DiskQuota(bytes=1 << 40, interval=0.01))
    first.start()
    await first.stop()
    assert first.released is not None
    await asyncio.wrap_future(first.released)
    assert WALKERS.holds(first._thread)
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    await _watch_past_a_mib(tmp_path)
    assert started == []


async def test_a_walk_still_under_way_holds_up_no_other_commands_watch(tmp_path: Path) -> None:
    """A watch stopped during a long walk (a big tree) keeps its thread until
    that walk is over; a command starting meanwhile gets a thread of its own
    and is measured at once."""
    slow_walk, walk_over = threading.Event(), threading.Event()
    first = QuotaWatch([tmp_path], DiskQuota(bytes=1 << 40, interval=0.01))
    walks = 0

    def long_second_walk() -> Usage:
        nonlocal walks
        walks += 1
        if walks == 2:
            slow_walk.set()
            walk_over.wait(30)
        return Usage(0, 0)

    first._measure = long_second_walk
    first.start()
    await asyncio.to_thread(slow_walk.wait, 10)
    await first.stop()
    try:
        await _watch_past_a_mib(tmp_path)
    finally:
        walk_over.set()
    assert first.released is not None
    await asyncio.wrap_future(first.released)
    assert WALKERS.holds(first._thread)  # back once its walk was over


def test_a_forked_child_keeps_none_of_the_parents_watch_threads() -> None:
    """Threads stay in the parent: a child handed one of its kept executors
    would queue walks that never run (no quota enforced)."""
    kept = WALKERS.borrow()
    kept.submit(int).result()  # its thread runs
    WALKERS.give_back(kept)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not WALKERS.holds(kept) and WALKERS.borrow() is not kept else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def user_namespace() -> Iterator[UserNamespace]:
    """A command's user namespace and its helper, as an unprivileged worker
    makes them (the maps written by this root process)."""
    userns = UserNamespace.create(SANDBOX_USER, [], mapper=root_maps)
    try:
        yield userns
    finally:
        assert userns.release() is None


@AS_ROOT
def test_the_namespace_probe_measures_as_the_worker_would(
    tmp_path: Path, user_namespace: UserNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe (an unprivileged worker's watcher) answers walk after walk,
    each seeing the tree as it is then, from the helper that made the
    namespace: no process of its own."""

    def no_process(*_: object, **__: object) -> None:
        raise AssertionError("the quota's walk started a process")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    quota = DiskQuota(bytes=1 << 40)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(bytes(MiB))
    probe = NamespaceProbe(user_namespace, [tmp_path], quota)
    assert probe() == measure([tmp_path], quota)
    (tmp_path / "more").write_bytes(bytes(2 * MiB))
    second = probe()
    assert second == measure([tmp_path], quota)
    assert second.bytes >= 3 * MiB and second.entries == 3


async def test_a_probe_that_cannot_measure_stops_the_command(tmp_path: Path) -> None:
    """Fail closed: a namespace whose helper is gone (here it never ran)
    reads as a tree over the quota."""
    helper = subprocess.Popen(
        ["true"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    helper.wait()
    fd = os.open(tmp_path, os.O_RDONLY)
    gone = UserNamespace(fd, [], helper)
    watch = QuotaWatch([tmp_path], DiskQuota(bytes=1 << 40), userns=gone)
    watch.start()
    try:
        await asyncio.wait_for(watch.exceeded.wait(), 10)
    finally:
        await watch.stop()
        assert gone.release() is not None  # nothing answered the hand-back either
    assert watch.reason is not None
    assert watch.reason.startswith("the workspace holds a tree its disk quota could not measure")


@pytest.mark.parametrize("module", [quota_walk, userns_helper], ids=lambda m: m.__name__)
def test_the_namespace_helper_imports_only_light_standard_modules(
    tmp_path: Path, module: ModuleType
) -> None:
    """An unprivileged worker starts the namespace's helper, which loads the
    quota's walk, for every command: importing asyncio, subprocess and the
    like there cost about 40 ms of CPU each time."""
    load = (
        "import importlib.util, sys; "
        "spec = importlib.util.spec_from_file_location('m', sys.argv[1]); "
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))"
    )
    assert module.__file__ is not None
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", load, module.__file__],
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    heavy = {"asyncio", "concurrent", "subprocess", "pathlib", "dataclasses", "app"}
    assert not imported & heavy, imported & heavy


def test_the_helper_loads_the_walk_the_worker_uses(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x" * 5000)
    walk = userns_helper._quota_walk()
    assert walk([str(tmp_path)], 1 << 40, 1000) == quota_walk.walk([str(tmp_path)], 1 << 40, 1000)
