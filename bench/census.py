"""Where a multi-process benchmark's time goes: per-process CPU, what each
worker process did with its jobs, Redis commands and database work, read as
differences across the timed part of a case (``python -m bench.throughput --census``).

- CPU: ``utime + stime`` of each process from ``/proc`` (all its threads), so
  our worker processes and DBOS's executors are read the same way.
- Worker counters (execution cache hits and misses, jobs taken from Redis,
  run eagerly or sent, fused and unfused completions, relayed jobs) and,
  optionally, the SQL census of ``bench.profile``: a worker process started
  with ``--stats PATH`` writes them to PATH on SIGUSR1.
- Redis: ``MONITOR``, counting the commands sent to the benchmark's database
  only (the server is shared with other databases).
- PostgreSQL: ``pg_stat_database`` of the case's own database (transactions,
  rows read and written), for both systems.

The census costs CPU itself (the SQL census walks the stack per statement,
MONITOR makes Redis copy every command), so figures taken with it are not
throughput figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import Engine, text

from app.engine._runtime import Runtime
from bench.profile import STORE, Census, install_census

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process and all its threads so far."""
    return cpu_with_children(pid)[0]


def cpu_with_children(pid: int) -> tuple[float, float]:
    """:func:`cpu_seconds`, and that of the children the process has reaped."""
    # The command name (field 2) may hold spaces: split after its ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / _TICK
    return own, (int(fields[13]) + int(fields[14])) / _TICK


# -- the worker process's side --------------------------------------------------


def serve_stats(runtime: Runtime, path: Path, *, sql: bool) -> None:
    """On SIGUSR1, write this process's counters to ``path`` (whole, by rename)."""
    census: Census | None = install_census(runtime.store.engine, (STORE,)) if sql else None
    if census is not None:
        census.active = True
    written = 0

    def write() -> None:
        nonlocal written
        written += 1
        worker = runtime.worker
        stats: dict[str, Any] = {
            "seq": written,
            "cache_hits": worker.cache.hits,
            "cache_misses": worker.cache.misses,
            "redispatched": runtime.reconciler.redispatched,
            **asdict(worker.counts),
        }
        if census is not None:
            stats["transactions"] = dict(census.transactions)
            stats["statements"] = dict(census.statements)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats))
        tmp.rename(path)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, write)


def _written(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"seq": 0}


async def read_stats(pid: int, path: Path, timeout: float = 10.0) -> dict[str, Any]:
    """Ask the worker process ``pid`` for its counters and wait for them."""
    before = (await asyncio.to_thread(_written, path))["seq"]
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = await asyncio.to_thread(_written, path)
        if stats["seq"] > before:
            return stats
        await asyncio.sleep(0.01)
    raise TimeoutError(f"process {pid} wrote no stats to {path}")


def difference(after: dict[str, Any], before: dict[str, Any]) -> Counter[str]:
    """Counters in ``after`` less those in ``before``; nested counts flattened
    as ``group: key``."""
    out: Counter[str] = Counter()
    for key, value in after.items():
        if key == "seq":
            continue
        if isinstance(value, dict):
            old = before.get(key, {})
            for sub, count in value.items():
                out[f"{key}: {sub}"] += count - old.get(sub, 0)
        else:
            out[key] += value - before.get(key, 0)
    return out


# -- Redis -------------------------------------------------------------------------


@asynccontextmanager
async def redis_commands(url: str) -> AsyncIterator[Counter[str]]:
    """Count, by name, the commands clients sent to ``url``'s database while inside."""
    client = Redis.from_url(url)
    database = int(client.connection_pool.connection_kwargs.get("db", 0))
    counts: Counter[str] = Counter()

    async def listen() -> None:
        async with client.monitor() as monitor:
            async for command in monitor.listen():
                # Commands a Lua script issues are listed too: count only the
                # clients' own, one per command sent (a pipeline sends several).
                if int(command["db"]) == database and command.get("client_type") != "lua":
                    counts[command["command"].split(" ", 1)[0].strip('"').upper()] += 1

    task = asyncio.create_task(listen())
    await asyncio.sleep(0.2)  # MONITOR is on before the case goes on
    try:
        yield counts
    finally:
        await asyncio.sleep(0.2)  # the last commands reach the monitor
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()


# -- PostgreSQL --------------------------------------------------------------------

_PG_COLUMNS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


def pg_backends(engine: Engine) -> list[int]:
    """Server process ids of every connection to this database now (the
    pools are warm by the timed batch, so these are the ones doing its work)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        )
        return [int(pid) for (pid,) in rows]


def backend_cpu(pids: Iterable[int]) -> dict[int, float]:
    """CPU so far of those of ``pids`` that still exist."""
    out = {}
    for pid in pids:
        with suppress(FileNotFoundError, ProcessLookupError):
            out[pid] = cpu_seconds(pid)
    return out


def pg_database_stats(engine: Engine) -> dict[str, int]:
    """This database's counters in ``pg_stat_database`` (refreshed first:
    within a transaction the statistics snapshot would not move)."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(
            text(
                f"SELECT {', '.join(_PG_COLUMNS)} FROM pg_stat_database "
                "WHERE datname = current_database()"
            )
        ).one()
    return dict(zip(_PG_COLUMNS, (int(v) for v in row), strict=True))


# -- the report --------------------------------------------------------------------


def per_step_lines(title: str, counts: Counter[str], steps: int, *, top: int = 40) -> list[str]:
    lines = [f"  {title}: {sum(counts.values()) / steps:.2f} per step"]
    for key, count in counts.most_common(top):
        if count:
            lines.append(f"    {count / steps:7.3f}  {key}")
    return lines


def cpu_line(label: str, seconds: Iterable[float], steps: int) -> str:
    each = list(seconds)
    parts = " + ".join(f"{s:.2f}" for s in each)
    return f"  {label} CPU: {sum(each):.2f} s ({parts}), {1000 * sum(each) / steps:.2f} ms per step"
