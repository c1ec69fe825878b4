"""What the multi-process benchmarks share: default service URLs, an empty
Redis database, and waiting (without a busy loop) for worker processes and
for a condition read from the database."""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from redis.asyncio import Redis
from sqlalchemy import Engine, text

DEFAULT_POSTGRES = os.environ.get(
    "BENCH_POSTGRES_URL",
    os.environ.get("TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
)
#: Its own Redis database: every case flushes it before it starts.
DEFAULT_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
T = TypeVar("T")

#: Anything the benchmarks wait for that takes longer than this is broken.
PATIENCE = 600.0


async def empty_redis(url: str) -> None:
    client = Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def wait_until(
    done: Callable[[], bool],
    check: Callable[[], None],
    *,
    timeout: float = PATIENCE,
    every: float = 0.02,
) -> None:
    """Poll ``done`` (off the event loop) until true; ``check`` raises if a
    process the wait depends on died."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(done):
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s")
        await asyncio.sleep(every)


async def wait_for_workers(engine: Engine, count: int, check: Callable[[], None]) -> None:
    """Until ``count`` worker processes have beaten their liveness row."""
    query = text("SELECT count(*) FROM workers WHERE last_seen > 0")

    def ready() -> bool:
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one()) >= count

    await wait_until(ready, check, timeout=60.0, every=0.1)


def add_service_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES,
        help="admin URL; each case creates and drops its own database",
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis db it may flush")


async def warm_then_time(batch: Callable[[str, int], Awaitable[float]], warm: int, m: int) -> float:
    """Run a warm-up batch of ``warm`` workflows, then time a batch of ``m``:
    from just before its start to its last recorded end (what ``batch``
    returns, epoch seconds)."""
    await batch("warmup", warm)
    started = time.time()
    return await batch("m", m) - started


def run_with_logs(
    name: str,
    run: Callable[[argparse.Namespace, Path], Coroutine[Any, Any, T]],
    args: argparse.Namespace,
) -> T:
    """``run(args, log_dir)`` on a fresh event loop; the processes' logs go to
    a temporary folder that is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        return asyncio.run(run(args, Path(tmp)))
