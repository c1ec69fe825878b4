"""Throughput benchmark: M workflows of 10 no-op steps started at once, run
by W worker processes on PostgreSQL through arq (real Redis), against DBOS
Transact running the same workflows from a queue in W executor processes with
the same concurrency each, in the same run.

    python -m bench.throughput [--m 100] [--full] [--workers 1 2 4]
                               [--concurrency 8] [--dbos-poll 0.01]

``--full`` is M=1000. Each case gets a fresh database (and a flushed Redis
database). The clock runs from just before the first start (or enqueue) to
the last workflow's recorded end, read from the database afterwards, so
polling for completion adds nothing to the figure. A warm-up batch of
W x concurrency workflows runs first on each side (connections, caches).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dbos import DBOSClient
from sqlalchemy import Engine, TextClause, text

from app.engine._arq_dispatch import ArqDispatcher
from app.engine._client import RuntimeClient
from app.engine._db import make_engine
from app.engine._redis_channel import connect
from app.operations.migrate import upgrade
from bench import census, dbos_workers
from bench.databases import fresh_database
from bench.environment import at_start, heading, load
from bench.fleet_setup import (
    add_service_args,
    empty_redis,
    run_with_logs,
    wait_for_workers,
    wait_until,
    warm_then_time,
)
from bench.spec import POSTGRES
from bench.workers import REGISTRY, STEPS, WorkerFleet

STEP_COUNT = 10
#: A case that has not finished after this long is broken, not slow.
CASE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Figures:
    system: str
    workers: int
    m: int
    seconds: float
    #: Ours: outbox rows the relay sent again during the timed batch.
    resent: int = 0
    #: ``--census``: where the time went in the timed batch (bench.census).
    census: list[str] = field(default_factory=list)

    @property
    def workflows_per_s(self) -> float:
        return self.m / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.m * STEP_COUNT / self.seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--m", type=int, default=100, help="workflows per case")
    parser.add_argument("--full", action="store_true", help="M=1000")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, default=8, help="jobs per worker process")
    parser.add_argument(
        "--dbos-poll", type=float, default=0.01, help="DBOS queue polling interval, s"
    )
    parser.add_argument(
        "--relay-grace",
        type=float,
        default=WorkerFleet.relay_grace,
        help="REPAIRBOT_RELAY_GRACE for our workers (default: the setting's default)",
    )
    parser.add_argument(
        "--census",
        action="store_true",
        help="also count CPU, jobs, Redis commands and database work per step",
    )
    parser.add_argument(
        "--sql-census",
        action="store_true",
        help="with --census: count our SQL statements too (costs our workers CPU)",
    )
    add_service_args(parser)
    args = parser.parse_args(argv)
    if args.full:
        args.m = 1000
    return args


# -- ours -------------------------------------------------------------------------


async def run_ours(args: argparse.Namespace, w: int, log_dir: Path) -> Figures:
    with fresh_database(POSTGRES, admin_url=args.postgres_url) as url:
        upgrade(url)
        await empty_redis(args.redis_url)
        engine = make_engine(url)
        fleet = WorkerFleet(
            url,
            args.redis_url,
            log_dir,
            concurrency=args.concurrency,
            relay_grace=args.relay_grace,
            stats=args.census,
            sql_census=args.census and args.sql_census,
        )
        pool = await connect(args.redis_url)
        try:
            for i in range(w):
                fleet.start(f"ours-w{i}")
            await wait_for_workers(engine, w, fleet.check_alive)
            client = RuntimeClient(engine, REGISTRY)
            client.use_dispatcher(ArqDispatcher(pool))

            resends = Resends(engine)
            lines: list[str] = []

            async def batch(prefix: str, m: int) -> float:
                resends.seen.clear()
                sampling = asyncio.create_task(resends.sample_until_cancelled())
                try:
                    async with AsyncExitStack() as stack:
                        if args.census and prefix != "warmup":
                            await stack.enter_async_context(
                                _ours_census(args, fleet, engine, lines)
                            )
                        await _ours_batch(client, engine, fleet, prefix, m)
                finally:
                    sampling.cancel()
                return _ours_last_end(engine, prefix, m)

            seconds = await warm_then_time(batch, w * args.concurrency, args.m)
            return Figures("ours", w, args.m, seconds, resent=resends.total, census=lines)
        finally:
            await pool.aclose()
            fleet.stop()
            engine.dispose()


async def _ours_batch(
    client: RuntimeClient, engine: Engine, fleet: WorkerFleet, prefix: str, m: int
) -> None:
    await asyncio.gather(
        *(client.start_workflow(STEPS, f"{prefix}-{k}", STEP_COUNT) for k in range(m))
    )
    query = text(
        "SELECT count(*) FROM workflow_runs WHERE workflow_id LIKE :p AND status = 'completed'"
    )
    await wait_until(lambda: _count(engine, query, f"{prefix}-%") >= m, fleet.check_alive)


class Resends:
    """Re-sends by the relay, seen by sampling the outbox every 0.1 s. A row's
    count goes with the row, so a re-send shortly before a row is consumed
    may be missed: a lower bound."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seen: dict[int, int] = {}  # outbox row id -> highest relay count seen

    def sample(self) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, relays FROM outbox WHERE relays > 0")).all()
        for row_id, relays in rows:
            self.seen[row_id] = max(self.seen.get(row_id, 0), relays)

    async def sample_until_cancelled(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(0.1)

    @property
    def total(self) -> int:
        return sum(self.seen.values())


def _ours_last_end(engine: Engine, prefix: str, m: int) -> float:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), max(closed_at) FROM workflow_runs WHERE workflow_id LIKE :p "
                "AND status = 'completed' AND CAST(result AS TEXT) = :r"
            ),
            {"p": f"{prefix}-%", "r": str(STEP_COUNT)},
        ).one()
    if row[0] != m:
        raise RuntimeError(f"{row[0]} of {m} runs completed with result {STEP_COUNT}")
    return float(row[1])


def _count(engine: Engine, query: TextClause, pattern: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(query, {"p": pattern}).scalar_one())


# -- DBOS -------------------------------------------------------------------------


async def run_dbos(args: argparse.Namespace, w: int, log_dir: Path) -> Figures:
    with fresh_database(POSTGRES, admin_url=args.postgres_url) as url:
        procs = [
            dbos_workers.start(url, args.concurrency, args.dbos_poll, log_dir / f"dbos-w{i}.log")
            for i in range(w)
        ]
        engine = make_engine(url)
        client: DBOSClient | None = None
        try:
            for proc in procs:
                assert proc.stdout is not None
                line = await asyncio.to_thread(proc.stdout.readline)
                if line.strip() != "ready":
                    raise RuntimeError(f"a DBOS executor did not start (see {log_dir})")
            client = DBOSClient(system_database_url=url)

            def alive() -> None:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"a DBOS executor exited (see {log_dir})")

            lines: list[str] = []

            async def batch(prefix: str, m: int) -> float:
                assert client is not None
                async with AsyncExitStack() as stack:
                    if args.census and prefix != "warmup":
                        pids = [p.pid for p in procs]
                        await stack.enter_async_context(_census(pids, engine, m, lines))
                    await _dbos_batch(client, engine, alive, prefix, m)
                return _dbos_last_end(engine, prefix, m)

            seconds = await warm_then_time(batch, w * args.concurrency, args.m)
            return Figures("dbos", w, args.m, seconds, census=lines)
        finally:
            if client is not None:
                client.destroy()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
            engine.dispose()


async def _dbos_batch(
    client: DBOSClient, engine: Engine, alive: Callable[[], None], prefix: str, m: int
) -> None:
    ids = [f"{prefix}-{k}" for k in range(m)]
    await asyncio.to_thread(dbos_workers.enqueue, client, ids, STEP_COUNT)
    query = text(
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE :p "
        "AND status = 'SUCCESS'"
    )
    await wait_until(lambda: _count(engine, query, f"{prefix}-%") >= m, alive)


def _dbos_last_end(engine: Engine, prefix: str, m: int) -> float:
    with engine.connect() as conn:
        done, last = conn.execute(
            text(
                "SELECT count(*), max(updated_at) FROM dbos.workflow_status "
                "WHERE workflow_uuid LIKE :p AND status = 'SUCCESS'"
            ),
            {"p": f"{prefix}-%"},
        ).one()
        steps = conn.execute(
            text("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid LIKE :p"),
            {"p": f"{prefix}-%"},
        ).scalar_one()
    if done != m or steps != m * STEP_COUNT:
        raise RuntimeError(f"DBOS: {done} of {m} workflows, {steps} of {m * STEP_COUNT} steps")
    return float(last) / 1000.0  # DBOS records epoch milliseconds


# -- the census (--census) ---------------------------------------------------------


@asynccontextmanager
async def _census(pids: list[int], engine: Engine, m: int, lines: list[str]) -> AsyncIterator[None]:
    """What both systems are read for: process CPU and the database's counters."""
    steps = m * STEP_COUNT
    cpu = [census.cpu_seconds(pid) for pid in pids]
    backends = census.backend_cpu(census.pg_backends(engine))
    pg = census.pg_database_stats(engine)
    yield
    backends_after = census.backend_cpu(backends)
    used = [census.cpu_seconds(pid) - before for pid, before in zip(pids, cpu, strict=True)]
    lines.append(census.cpu_line("worker processes'", used, steps))
    served = sum(backends_after[pid] - backends[pid] for pid in backends_after)
    lines.append(
        f"  PostgreSQL backends' CPU ({len(backends)} connections open before the batch): "
        f"{served:.2f} s, {1000 * served / steps:.2f} ms per step"
    )
    # Backends report their statistics within a second of going idle.
    await asyncio.sleep(1.5)
    after = census.pg_database_stats(engine)
    pg_diff = Counter({k: after[k] - pg[k] for k in pg})
    lines.extend(census.per_step_lines("PostgreSQL (pg_stat_database)", pg_diff, steps))


@asynccontextmanager
async def _ours_census(
    args: argparse.Namespace, fleet: WorkerFleet, engine: Engine, lines: list[str]
) -> AsyncIterator[None]:
    """The common census plus each worker process's counters and Redis commands."""
    steps = args.m * STEP_COUNT
    pids = [p.pid for p in fleet.processes]
    before = await fleet.read_stats()
    async with (
        census.redis_commands(args.redis_url) as redis,
        _census(pids, engine, args.m, lines),
    ):
        yield
    after = await fleet.read_stats()
    for k, (new, old) in enumerate(zip(after, before, strict=True)):
        diff = census.difference(new, old)
        plain = {key: v for key, v in diff.items() if ":" not in key}
        lines.append(f"  process {k}: " + ", ".join(f"{key} {v}" for key, v in plain.items()))
    total: Counter[str] = Counter()
    for new, old in zip(after, before, strict=True):
        total.update(census.difference(new, old))
    lines.extend(census.per_step_lines("Redis commands (MONITOR)", redis, steps))
    sql = Counter({key: v for key, v in total.items() if key.startswith("statements: ")})
    tx = Counter({key: v for key, v in total.items() if key.startswith("transactions: ")})
    lines.extend(census.per_step_lines("SQL transactions (all processes)", tx, steps, top=15))
    lines.extend(census.per_step_lines("SQL statements (all processes)", sql, steps))


# -- the report -------------------------------------------------------------------


def table(pairs: list[tuple[Figures, Figures]]) -> str:
    lines = [
        "| W | M | ours wf/s | ours steps/s | DBOS wf/s | DBOS steps/s | ours/DBOS "
        "| ours re-sends |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ours, dbos in pairs:
        ratio = ours.workflows_per_s / dbos.workflows_per_s
        lines.append(
            f"| {ours.workers} | {ours.m} | {ours.workflows_per_s:.1f} | {ours.steps_per_s:.0f} "
            f"| {dbos.workflows_per_s:.1f} | {dbos.steps_per_s:.0f} | {ratio:.2f}x "
            f"| {ours.resent} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace, log_dir: Path) -> list[tuple[Figures, Figures]]:
    pairs = []
    for w in args.workers:
        # DBOS first, then ours, per W: neighbouring cases see the same load.
        dbos = await run_dbos(args, w, log_dir)
        print(f"  dbos W={w}: {dbos.workflows_per_s:.1f} wf/s  load {load()}", file=sys.stderr)
        ours = await run_ours(args, w, log_dir)
        print(
            f"  ours W={w}: {ours.workflows_per_s:.1f} wf/s, {ours.resent} re-sends  load {load()}",
            file=sys.stderr,
        )
        pairs.append((ours, dbos))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    start = at_start()
    pairs = run_with_logs("throughput", run, args)
    worst = min(o.workflows_per_s / d.workflows_per_s for o, d in pairs)
    print(heading("bench.throughput", argv, start))
    print(f"concurrency per process: {args.concurrency}; DBOS queue poll {args.dbos_poll}s\n")
    print(table(pairs))
    verdict = "MET" if worst >= 1.0 else "NOT MET"
    print(f"\nworst ours/DBOS {worst:.2f}x -> goal (at least DBOS's throughput) {verdict}")
    for ours, dbos in pairs if args.census else []:
        for figures in (ours, dbos):
            print(f"\ncensus, {figures.system} W={figures.workers}:")
            print("\n".join(figures.census))
    return 0


if __name__ == "__main__":
    sys.exit(main())
