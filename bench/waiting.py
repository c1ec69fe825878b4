"""Waiting-runs benchmark: runs parked on a signal with a 14-day timeout, on
PostgreSQL with one worker process through arq (real Redis).

    python -m bench.waiting [--n 1000] [--full] [--signals 50]

Two sizes in one database: first N/10 runs are parked, then the rest up to N
(``--full``: N=10,000). At each size, once every run is parked:

- what the runs hold: running attempts (leases), arq jobs due before the
  timers (ready or in progress), outbox rows other than the timers';
- the worker process's resident memory (VmRSS);
- the cost of one reconciler pass (the runtime's own ``Reconciler``, run here
  against the same database; median of ``--passes`` passes) and how many
  rows of ``workflow_runs`` its statements read (PostgreSQL's
  ``pg_stat_user_tables``), which is what must not grow with the runs.

Then ``--signals`` parked runs get their signal one at a time, as the web
process sends one (commit, then the job through Redis), and the latency from
the signal's record (``signals.received_at``, taken when its transaction
began, so the figure errs long) to the run's end (``closed_at``, the commit of
the workflow task that consumed it) is reported at p50 and max.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arq import ArqRedis
from arq.constants import in_progress_key_prefix
from sqlalchemy import Engine, text

from app.engine._arq_dispatch import ArqDispatcher
from app.engine._client import RuntimeClient
from app.engine._db import make_engine
from app.engine._jobs import DEFAULT_QUEUE, Job, workflow_queue
from app.engine._reconciler import Reconciler
from app.engine._redis_channel import connect
from app.operations.migrate import upgrade
from bench.databases import fresh_database
from bench.environment import at_start, heading, load
from bench.fleet_setup import (
    PATIENCE,
    add_service_args,
    empty_redis,
    run_with_logs,
    wait_for_workers,
    wait_until,
)
from bench.spec import POSTGRES
from bench.workers import PARK_TIMEOUT, PARKED, REGISTRY, WorkerFleet, WorkerProcess

#: Runs started per transaction while parking (the start is not measured).
START_BATCH = 200
#: Goals from the issue.
PASS_RATIO_GOAL = 1.2
SIGNAL_P50_GOAL_MS = 100.0
#: "Flat" memory: at most this growth from the small size to the large one.
RSS_FLAT = 1.10
#: Seconds a fresh worker runs (beats, reconciler passes) before its RSS is read.
SETTLE = 5.0
QUEUES = (DEFAULT_QUEUE, workflow_queue(PARKED, 1))


@dataclass
class SizeFigures:
    runs: int
    park_s: float = 0.0
    drain_s: float = 0.0
    leases: int = 0
    due_jobs: int = 0
    in_progress_jobs: int = 0
    deferred_timer_jobs: int = 0
    other_outbox_rows: int = 0
    rss_mib: float = 0.0
    fresh_rss_mib: float = 0.0
    pass_ms: float = 0.0
    pass_ms_all: list[float] = field(default_factory=list)
    run_rows_read_per_pass: float = 0.0

    @property
    def holds_nothing(self) -> bool:
        return (self.leases, self.due_jobs, self.in_progress_jobs, self.other_outbox_rows) == (
            0,
            0,
            0,
            0,
        )


@dataclass
class WaitingResult:
    small: SizeFigures
    large: SizeFigures
    signal_ms: list[float]

    @property
    def pass_ratio(self) -> float:
        return self.large.pass_ms / self.small.pass_ms

    @property
    def rss_ratio(self) -> float:
        return self.large.rss_mib / self.small.rss_mib

    @property
    def fresh_rss_ratio(self) -> float:
        return self.large.fresh_rss_mib / self.small.fresh_rss_mib


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.waiting", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="parked runs at the large size")
    parser.add_argument("--full", action="store_true", help="N=10,000")
    parser.add_argument("--signals", type=int, default=50)
    parser.add_argument("--passes", type=int, default=30, help="reconciler passes per size")
    add_service_args(parser)
    args = parser.parse_args(argv)
    if args.full:
        args.n = 10_000
    return args


# -- parking ----------------------------------------------------------------------


async def park(client: RuntimeClient, first: int, last: int) -> None:
    """Start runs ``park-<first>`` .. ``park-<last - 1>``, a batch per transaction."""
    for lo in range(first, last, START_BATCH):
        ids = [f"park-{k}" for k in range(lo, min(last, lo + START_BATCH))]

        def start(ids: list[str] = ids) -> list[Job]:
            with client.store.transaction() as tx:
                for workflow_id in ids:
                    tx.start_run(
                        workflow_name=PARKED,
                        workflow_version=1,
                        workflow_id=workflow_id,
                        input=None,
                        deadline_seconds=None,
                    )
            return tx.jobs

        await client.dispatch(await client.threads.run(start))


def parked_count(engine: Engine) -> int:
    """Runs that wait: open, no workflow task pending, their timer pending."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM workflow_runs r JOIN timers t ON t.run_id = r.run_id "
                    "WHERE r.status = 'running' AND NOT r.pending_task AND t.status = 'pending'"
                )
            ).scalar_one()
        )


# -- what the parked runs hold ----------------------------------------------------


async def holdings(engine: Engine, redis: ArqRedis, figures: SizeFigures) -> None:
    with engine.connect() as conn:
        figures.leases = int(
            conn.execute(
                text("SELECT count(*) FROM activity_tasks WHERE status = 'running'")
            ).scalar_one()
        )
        figures.other_outbox_rows = int(
            conn.execute(text("SELECT count(*) FROM outbox WHERE kind <> 'timer'")).scalar_one()
        )
    # A job due before the timers fire would be work a worker must pick up.
    figures.due_jobs = await due_jobs(redis)
    horizon_ms = (time.time() + PARK_TIMEOUT / 2) * 1000
    for queue in QUEUES:
        figures.deferred_timer_jobs += int(await redis.zcount(queue, horizon_ms, "+inf"))
    figures.in_progress_jobs = len([k async for k in redis.scan_iter(in_progress_key_prefix + "*")])


async def due_jobs(redis: ArqRedis) -> int:
    horizon_ms = (time.time() + PARK_TIMEOUT / 2) * 1000
    counts = [await redis.zcount(q, "-inf", horizon_ms) for q in QUEUES]
    return int(sum(counts))


async def drained(redis: ArqRedis, fleet: WorkerFleet) -> None:
    deadline = time.monotonic() + PATIENCE
    while await due_jobs(redis):
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError("the arq queues never drained")
        await asyncio.sleep(0.2)


# -- the reconciler pass ----------------------------------------------------------


async def time_passes(engine: Engine, client: RuntimeClient, passes: int, f: SizeFigures) -> None:
    sent: list[Job] = []

    async def sink(jobs: list[Job]) -> None:
        sent.extend(jobs)  # a parked run must give the reconciler nothing to do

    reconciler = Reconciler(client.store, sink, threads=client.threads)
    await reconciler.run_once()  # warm: connections, statement caches
    before = run_rows_read(engine)
    for _ in range(passes):
        started = time.perf_counter()
        await reconciler.run_once()
        f.pass_ms_all.append((time.perf_counter() - started) * 1000)
    # The stats collector reports with a delay: wait until it caught up.
    await asyncio.sleep(1.0)
    f.run_rows_read_per_pass = (run_rows_read(engine) - before) / passes
    f.pass_ms = statistics.median(f.pass_ms_all)
    if sent:
        raise RuntimeError(f"the reconciler found work among parked runs: {sent[:5]}")


def analyse(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("ANALYZE workflow_runs, timers, outbox, activity_tasks, workers"))
        conn.commit()


def run_rows_read(engine: Engine) -> int:
    """Rows of workflow_runs read so far by sequential scans and index fetches."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(
            text(
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_user_tables WHERE relname = 'workflow_runs'"
            )
        ).scalar_one()
    return int(row)


# -- signals ----------------------------------------------------------------------


async def signal_latencies(
    engine: Engine, client: RuntimeClient, fleet: WorkerFleet, count: int
) -> list[float]:
    latencies = []
    for k in range(count):
        workflow_id = f"park-{k}"
        await client.signal(workflow_id, "go", k, dedupe_key=f"go-{k}")

        def ended(workflow_id: str = workflow_id) -> bool:
            with engine.connect() as conn:
                return (
                    conn.execute(
                        text(
                            "SELECT 1 FROM workflow_runs "
                            "WHERE workflow_id = :w AND status = 'completed'"
                        ),
                        {"w": workflow_id},
                    ).first()
                    is not None
                )

        await wait_until(ended, fleet.check_alive, timeout=60.0, every=0.005)
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT r.closed_at - s.received_at, r.result FROM workflow_runs r "
                    "JOIN signals s ON s.run_id = r.run_id WHERE r.workflow_id = :w"
                ),
                {"w": workflow_id},
            ).one()
        if row[1] != str(k):
            raise RuntimeError(f"{workflow_id} ended with {row[1]!r}, not its signal {k}")
        latencies.append(float(row[0]) * 1000)
    return latencies


# -- the run ----------------------------------------------------------------------


async def measure_size(
    engine: Engine,
    client: RuntimeClient,
    redis: ArqRedis,
    fleet: WorkerFleet,
    args: argparse.Namespace,
    *,
    first: int,
    last: int,
) -> SizeFigures:
    worker = fleet.processes[-1]
    started = time.monotonic()
    await park(client, first, last)
    await wait_until(lambda: parked_count(engine) >= last, fleet.check_alive, every=0.2)
    parked_after = time.monotonic() - started
    # A burst of starts queues behind one worker, and the relay re-sends rows
    # not consumed within its grace (under fresh job ids): those copies are
    # no-ops, but they sit in the queue until the worker reaches them.
    await drained(redis, fleet)
    await asyncio.sleep(2.0)  # let the worker's last jobs and arq bookkeeping end
    figures = SizeFigures(last, rss_mib=worker.rss_kib() / 1024)
    figures.park_s, figures.drain_s = parked_after, time.monotonic() - started
    print(
        f"  parked {last} runs in {parked_after:.0f}s, queue drained after {figures.drain_s:.0f}s"
        f"  load {load()}",
        file=sys.stderr,
    )
    await holdings(engine, redis, figures)
    # Steady state: autovacuum would have analysed the tables by now in
    # production. Right after a burst of inserts the planner has no
    # statistics and may read every open run through the status index.
    await asyncio.to_thread(analyse, engine)
    await time_passes(engine, client, args.passes, figures)
    figures.fresh_rss_mib = await fresh_worker_rss(engine, fleet, worker)
    return figures


async def fresh_worker_rss(engine: Engine, fleet: WorkerFleet, worker: WorkerProcess) -> float:
    """Replace the worker with a fresh process and read its memory once it
    has beaten and reconciled for a while: what the parked runs cost a
    worker that did not park them (no cached executions, no allocator
    high-water mark from the burst)."""
    worker.stop()
    fresh = fleet.start(f"parker-{len(fleet.processes)}")
    await wait_for_workers(engine, 1, fleet.check_alive)
    await asyncio.sleep(SETTLE)
    return fresh.rss_kib() / 1024


async def run(args: argparse.Namespace, log_dir: Path) -> WaitingResult:
    with fresh_database(POSTGRES, admin_url=args.postgres_url) as url:
        upgrade(url)
        await empty_redis(args.redis_url)
        engine = make_engine(url)
        fleet = WorkerFleet(url, args.redis_url, log_dir)
        redis = await connect(args.redis_url)
        try:
            fleet.start("parker")
            await wait_for_workers(engine, 1, fleet.check_alive)
            client = RuntimeClient(engine, REGISTRY)
            client.use_dispatcher(ArqDispatcher(redis))
            small_n = max(1, args.n // 10)
            common: dict[str, Any] = {"args": args}
            small = await measure_size(
                engine, client, redis, fleet, first=0, last=small_n, **common
            )
            large = await measure_size(
                engine, client, redis, fleet, first=small_n, last=args.n, **common
            )
            signals = await signal_latencies(engine, client, fleet, min(args.signals, args.n))
            return WaitingResult(small, large, signals)
        finally:
            await redis.aclose()
            fleet.stop()
            engine.dispose()


def table(result: WaitingResult) -> str:
    s, b = result.small, result.large
    rows = [
        ("parked runs", s.runs, b.runs, ""),
        (
            "seconds to park them / until the queue drained",
            f"{s.park_s:.0f} / {s.drain_s:.0f}",
            f"{b.park_s:.0f} / {b.drain_s:.0f}",
            "",
        ),
        ("running attempts (leases)", s.leases, b.leases, ""),
        (
            "arq jobs due before the timers / in progress",
            f"{s.due_jobs} / {s.in_progress_jobs}",
            f"{b.due_jobs} / {b.in_progress_jobs}",
            "",
        ),
        ("outbox rows other than timers'", s.other_outbox_rows, b.other_outbox_rows, ""),
        (
            "deferred timer jobs in arq (14 days out)",
            s.deferred_timer_jobs,
            b.deferred_timer_jobs,
            "",
        ),
        ("worker RSS, MiB", f"{s.rss_mib:.1f}", f"{b.rss_mib:.1f}", f"{result.rss_ratio:.2f}x"),
        (
            "fresh worker's RSS (restarted with the runs parked), MiB",
            f"{s.fresh_rss_mib:.1f}",
            f"{b.fresh_rss_mib:.1f}",
            f"{result.fresh_rss_ratio:.2f}x",
        ),
        (
            "reconciler pass, ms (median)",
            f"{s.pass_ms:.2f}",
            f"{b.pass_ms:.2f}",
            f"{result.pass_ratio:.2f}x",
        ),
        (
            "workflow_runs rows read per pass (all reconcilers)",
            f"{s.run_rows_read_per_pass:.0f}",
            f"{b.run_rows_read_per_pass:.0f}",
            "",
        ),
    ]
    lines = ["| | small | large | large/small |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {x} | {y} | {z} |" for a, x, y, z in rows]
    return "\n".join(lines)


def verdicts(result: WaitingResult) -> list[str]:
    p50 = statistics.median(result.signal_ms)
    holds = result.small.holds_nothing and result.large.holds_nothing

    def met(ok: bool) -> str:
        return "MET" if ok else "NOT MET"

    return [
        f"signal to resumed run, ms: p50 {p50:.1f}, max {max(result.signal_ms):.1f} "
        f"over {len(result.signal_ms)} signals -> p50 <= {SIGNAL_P50_GOAL_MS:.0f} ms "
        f"{met(p50 <= SIGNAL_P50_GOAL_MS)}",
        f"parked runs hold no lease, no due job, no job in progress: {met(holds)}",
        f"reconciler pass large/small {result.pass_ratio:.2f}x -> <= {PASS_RATIO_GOAL}x "
        f"{met(result.pass_ratio <= PASS_RATIO_GOAL)}",
        f"fresh worker RSS large/small {result.fresh_rss_ratio:.2f}x -> flat (<= {RSS_FLAT}x) "
        f"{met(result.fresh_rss_ratio <= RSS_FLAT)}; the worker that parked them: "
        f"{result.rss_ratio:.2f}x (what parking them left in that process)",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    start = at_start()
    result = run_with_logs("waiting", run, args)
    print(heading("bench.waiting", argv, start) + "\n")
    print(table(result))
    print()
    print("\n".join(verdicts(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
