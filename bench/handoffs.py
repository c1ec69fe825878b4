"""Threads and thread hand-offs per subprocess and per sandboxed command.

``python -m bench.handoffs [--rounds 10] [--spawns 100] [--watches 50] [--ballast 120]``

Three microbenchmarks, each variant in turn round by round (the one that
goes first alternating), CPU from ``time.process_time`` (every thread of
this process), in a process made worker-sized first (``--ballast`` MiB of
Python objects: a worker holds about 130 MiB):

- **spawn**: ``asyncio.create_subprocess_exec("true")`` and its exit,
  under asyncio's ``ThreadedChildWatcher`` (a thread per child: Python
  3.11's default) and under :class:`app.main.children.PidfdWatcher` (the
  worker's and web process's); CPU per spawn and threads started.
- **quota watch**: a :class:`app.sandbox.quota.QuotaWatch` started and
  stopped over a small tree (its first walk), with a one-thread executor
  started and shut down per watch (as before ``WALKERS``) and with the
  thread borrowed from ``WALKERS``; CPU per watch and threads started.
- **hand-off**: what ``asyncio.to_thread`` adds around a call (a no-op run
  inline against handed to the default executor), beside what the sandbox's
  ``prepare`` and ``Launch.cleanup`` cost for the demo-sized workspace
  (``--sandbox``; needs bwrap and root, as the worker here), and for it
  with 5,000 more files.

Not a test: it asserts nothing and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from app.main import children
from app.sandbox import quota
from app.sandbox.quota import DiskQuota, QuotaWatch
from bench.environment import load, machine, revision

#: Threads started since the benchmark began (``threading.Thread.start`` calls).
_started = 0


@contextmanager
def _counting_thread_starts() -> Iterator[None]:
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        global _started
        _started += 1
        start(self)

    threading.Thread.start = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]


@contextmanager
def _watcher(kind: str) -> Iterator[None]:
    previous = asyncio.get_child_watcher()
    asyncio.set_child_watcher(
        children.PidfdWatcher() if kind == "pidfd" else asyncio.ThreadedChildWatcher()
    )
    try:
        yield
    finally:
        asyncio.set_child_watcher(previous)


async def _spawns(n: int) -> None:
    for _ in range(n):
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()


class _ExecutorPerWatch(QuotaWatch):
    """The watch as it was: an executor of its own, shut down at stop."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        quota.WALKERS.give_back(self._thread)  # not used
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quota-watch")

    def _release(self) -> None:
        if self._probe is not None:
            self._probe.close()
        self._thread.shutdown(wait=False)


async def _watches(n: int, kind: str, tree: Path) -> None:
    make = _ExecutorPerWatch if kind == "executor per watch" else QuotaWatch
    for _ in range(n):
        watch = make([tree], DiskQuota(bytes=1 << 40, interval=0.01))
        watch.start()
        await watch.stop()
        if watch.released is not None:
            await asyncio.wrap_future(watch.released)


def _noop() -> None:
    pass


async def _inline(n: int) -> None:
    for _ in range(n):
        _noop()


async def _handed(n: int) -> None:
    for _ in range(n):
        await asyncio.to_thread(_noop)


async def _measure(
    variants: dict[str, Callable[[], Awaitable[None]]], rounds: int, per_round: int
) -> dict[str, tuple[float, float]]:
    """Median CPU ms per item and threads started per item, by variant."""
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    threads: dict[str, int] = dict.fromkeys(variants, 0)
    names = list(variants)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            before, started = time.process_time(), _started
            await variants[name]()
            cpu[name].append((time.process_time() - before) * 1000 / per_round)
            threads[name] += _started - started
    return {
        name: (statistics.median(cpu[name]), threads[name] / (rounds * per_round)) for name in names
    }


def _sandbox_costs(rounds: int, extra_files: int) -> list[str]:
    """CPU and wall time of ``prepare`` and ``Launch.cleanup`` around a demo-sized tree."""
    from app.demo.project import write_project
    from app.sandbox.launch import prepare
    from app.sandbox.policy import Isolation
    from app.sandbox.runner import ResourceLimits

    limits = ResourceLimits()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_project(repo)
        for i in range(extra_files):  # a larger repository: more to hand over
            folder = repo / "more" / f"d{i // 100}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i}.py").write_text("x = 1\n")
        isolation = Isolation(mode="bwrap")
        limits_by = "?"
        prepared: list[float] = []
        cleaned: list[float] = []
        walls: list[float] = []
        for _ in range(rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            launch = prepare(
                isolation,
                ["true"],
                cwd=repo,
                writable=[repo],
                memory_bytes=limits.memory_bytes,
                max_tasks=limits.tasks,
                rlimits=limits.rlimits(),
                tmpfs_bytes=None,
            )
            prepared.append((time.process_time() - cpu) * 1000)
            limits_by = launch.limits_by
            cpu = time.process_time()
            launch.cleanup()
            cleaned.append((time.process_time() - cpu) * 1000)
            walls.append((time.perf_counter() - wall) * 1000)
        files = sum(1 for _ in repo.rglob("*"))
        lines.append(
            f"| `prepare` ({files} entries handed over) | {statistics.median(prepared):.3f} ms |"
        )
        lines.append(
            f"| `Launch.cleanup` (limits by {limits_by}) | {statistics.median(cleaned):.3f} ms |"
        )
        lines.append(f"| both, wall time | {statistics.median(walls):.3f} ms |")
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    ballast = [bytes(1024) for _ in range(args.ballast * 1024)]  # noqa: F841 (held)
    lines = [
        f"revision {revision()}; {machine()}; load {load()}; ballast {args.ballast} MiB",
        "",
        "| what | variant | CPU per item | threads started per item |",
        "|---|---|---:|---:|",
    ]

    def spawns(kind: str) -> Callable[[], Awaitable[None]]:
        async def run_spawns() -> None:
            with _watcher(kind):
                await _spawns(args.spawns)

        return run_spawns

    if sys.version_info < (3, 12):  # 3.12 has no thread per child to compare with
        figures = await _measure(
            {"threaded (3.11's default)": spawns("threaded"), "pidfd": spawns("pidfd")},
            args.rounds,
            args.spawns,
        )
        lines += [f"| spawn | {k} | {ms:.3f} ms | {t:.2f} |" for k, (ms, t) in figures.items()]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        for i in range(50):
            (tree / f"f{i}").write_bytes(b"x" * 100)
        variants = {
            kind: (lambda kind=kind: _watches(args.watches, kind, tree))
            for kind in ("executor per watch", "borrowed from WALKERS")
        }
        figures = await _measure(variants, args.rounds, args.watches)  # type: ignore[arg-type]
    lines += [f"| quota watch | {k} | {ms:.3f} ms | {t:.2f} |" for k, (ms, t) in figures.items()]
    n = args.spawns * 10
    figures = await _measure(
        {"inline": lambda: _inline(n), "asyncio.to_thread": lambda: _handed(n)}, args.rounds, n
    )
    lines += [f"| no-op call | {k} | {ms:.4f} ms | {t:.2f} |" for k, (ms, t) in figures.items()]
    if args.sandbox:
        lines += ["", "| the sandbox's blocking steps (median) | CPU |", "|---|---:|"]
        for extra in (0, 5000):
            lines += _sandbox_costs(args.rounds * 5, extra)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.handoffs", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--spawns", type=int, default=100, help="per round and variant")
    parser.add_argument("--watches", type=int, default=50, help="per round and variant")
    parser.add_argument("--ballast", type=int, default=120, help="MiB held, as a worker")
    parser.add_argument("--sandbox", action="store_true", help="also price prepare and cleanup")
    with _counting_thread_starts():
        lines = asyncio.run(run(parser.parse_args(argv)))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
