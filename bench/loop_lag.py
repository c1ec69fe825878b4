"""Event-loop lag under load: how long can one store round trip stall every
other coroutine of a worker?

``python -m bench.loop_lag [--runs 200] [--steps 3] [--concurrency 32]``

One worker process (the in-process dispatcher: no Redis, so only the engine
and the database are measured) on a fresh PostgreSQL database runs ``--runs``
small workflows started together, each ``--steps`` no-op activities in
sequence. Beside them a probe sleeps 5 ms at a time and records by how much
each wake-up came late: that lateness is the time the loop was held by
something that did not yield (a synchronous database call, replay, JSON).
It reports the longest stall, p99 and p50 of the lateness, and the wall time.
Not a test: it asserts nothing and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Sequence

from sqlalchemy import Engine, bindparam, text

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._db import make_engine
from app.engine._heap import freeze_startup_heap
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._tables import CLOSED_STATUSES
from app.operations.migrate import upgrade
from bench.databases import fresh_database
from bench.environment import load, machine, revision
from bench.spec import POSTGRES

WORKFLOW = "lag-steps"
PROBE_INTERVAL = 0.005


@activity("lag-noop")
async def noop(actx: ActivityContext, i: int) -> int:
    return i


@workflow(WORKFLOW)
async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.activity(noop, i, step=f"s{i}")
    return n


REGISTRY = Registry.of([steps], [noop])


class LagProbe:
    """Sleeps ``interval`` at a time; each wake-up's lateness is one sample."""

    def __init__(self, interval: float = PROBE_INTERVAL) -> None:
        self.interval = interval
        self.samples: list[float] = []

    async def run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.samples.append(max(0.0, time.perf_counter() - before - self.interval))


class GcPauses:
    """How long each cyclic-collector pass held the interpreter (gc.callbacks)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._began = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._began))

    def longest_full_ms(self) -> float:
        return max((s for g, s in self.pauses if g == 2), default=0.0) * 1000


def closed_count(engine: Engine) -> int:
    with engine.connect() as conn:
        query = text("SELECT count(*) FROM workflow_runs WHERE status IN :closed")
        query = query.bindparams(bindparam("closed", expanding=True))
        return int(conn.execute(query, {"closed": list(CLOSED_STATUSES)}).scalar_one())


def summary(samples: list[float]) -> dict[str, float]:
    lags = sorted(samples)
    return {
        "samples": len(lags),
        "max_ms": lags[-1] * 1000,
        "p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1000,
        "p50_ms": statistics.median(lags) * 1000,
    }


async def idle_floor(seconds: float = 3.0) -> dict[str, float]:
    """The same probe with nothing else in the process: what the machine's
    own load (other processes on the same cores) costs the loop."""
    probe = LagProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(seconds)
    task.cancel()
    return summary(probe.samples)


async def measure(
    url: str, *, n_runs: int, n_steps: int, concurrency: int, pool_size: int, freeze: bool
) -> dict[str, float]:
    engine = make_engine(url, pool_size=pool_size)
    runtime = Runtime(engine, REGISTRY, concurrency=concurrency, reconcile_interval=1.0)
    # The completion check runs on a thread of its own in both revisions measured,
    # so it adds no stall of its own to either.
    watcher = make_engine(url, pool_size=1)
    await runtime.start_in_process()
    if freeze:
        freeze_startup_heap()  # as the worker process does once it has started
    probe = LagProbe()
    gc_pauses = GcPauses().__enter__()
    probe_task = asyncio.create_task(probe.run())
    await asyncio.sleep(0.2)  # a quiet baseline before the load
    started = time.perf_counter()
    await asyncio.gather(
        *(runtime.start_workflow(WORKFLOW, f"lag-{i}", n_steps) for i in range(n_runs))
    )
    # Samples before this mark saw the burst of starts (as an intake burst
    # would); the rest saw the worker alone.
    started_all = len(probe.samples)
    while await asyncio.to_thread(closed_count, watcher) < n_runs:
        if time.perf_counter() - started > 600:
            raise TimeoutError("runs did not finish in 600 s")
        await asyncio.sleep(0.1)
    wall = time.perf_counter() - started
    probe_task.cancel()
    gc_pauses.__exit__()
    await runtime.stop()
    engine.dispose()
    watcher.dispose()
    running = summary(probe.samples[started_all:] or [0.0])
    return {
        "wall_s": wall,
        **summary(probe.samples),
        "running_max_ms": running["max_ms"],
        "running_p99_ms": running["p99_ms"],
        "gc_full_passes": sum(1 for g, _ in gc_pauses.pauses if g == 2),
        "gc_longest_full_ms": gc_pauses.longest_full_ms(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--pool-size", type=int, default=10, help="database pool (and store threads)"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="skip freeze_startup_heap() (the worker's default) to see what it saves",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args(argv)
    print(f"revision {revision()}; {machine()}; load {load()}")
    print(
        f"{args.runs} runs x {args.steps} activities, worker concurrency {args.concurrency}, "
        f"database pool {args.pool_size}"
    )
    for _ in range(args.repeat):
        floor = asyncio.run(idle_floor())
        print(
            f"idle floor: longest stall {floor['max_ms']:.1f} ms, p99 {floor['p99_ms']:.1f} ms",
            flush=True,
        )
        with fresh_database(POSTGRES, admin_url=args.admin_url) as url:
            upgrade(url)
            figures = asyncio.run(
                measure(
                    url,
                    n_runs=args.runs,
                    n_steps=args.steps,
                    concurrency=args.concurrency,
                    pool_size=args.pool_size,
                    freeze=not args.no_freeze,
                )
            )
        print(
            f"longest stall {figures['max_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
            f"p50 {figures['p50_ms']:.2f} ms over {figures['samples']:.0f} samples; "
            f"after the starts: longest {figures['running_max_ms']:.1f} ms, "
            f"p99 {figures['running_p99_ms']:.1f} ms; "
            f"wall {figures['wall_s']:.1f} s; {figures['gc_full_passes']:.0f} full gc passes, "
            f"longest {figures['gc_longest_full_ms']:.1f} ms; load after {load()}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
