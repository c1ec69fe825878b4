"""A worker process's engine side over arq, from start to a clean exit.

Kept apart from ``app.main.worker_process`` (which wires GitHub clients and the agent) so
that anything that only runs the engine starts without importing them.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from arq import ArqRedis
from redis.exceptions import RedisError

from app.engine._arq_dispatch import POLL_DELAY, ArqConsumers, ArqDispatcher
from app.engine._redis_channel import connect, redis_settings
from app.engine._runtime import Runtime

log = logging.getLogger("repairbot.worker")


def stop_requested() -> asyncio.Event:
    """An event SIGTERM (a deploy) or SIGINT sets, from now on."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    return stopping


async def until_stopped() -> None:
    """Wait for SIGTERM (a deploy) or SIGINT."""
    await stop_requested().wait()


async def serve_arq(
    runtime: Runtime,
    redis_url: str,
    *,
    concurrency: int,
    reconcile_interval: float,
    drain_grace: float,
    poll_delay: float = POLL_DELAY,
    eager: bool = True,
) -> int:
    """Work arq's queues on ``redis_url`` until SIGTERM, then drain and return 0."""
    runtime.registry.check_implemented()  # as in-process workers do: refused before serving
    pool = await _connect_patiently(redis_url)
    dispatcher = ArqDispatcher(pool)
    # No job is run here before the first beat (Runtime.start_liveness): not
    # eagerly (a reconciler pass's follow-ups go through Redis until then),
    # not from the queues (the consumers start after it).
    runtime.use_dispatcher(dispatcher, eager=False)
    runtime.start_liveness()
    # The reconciler runs here, not as an arq cron: recovery goes on while Redis is away.
    runtime.reconciler.start(reconcile_interval)
    consumers = ArqConsumers(
        runtime, redis_settings(redis_url), max_jobs=concurrency, poll_delay=poll_delay
    )
    # A deploy may stop a worker still waiting for the database: it drains too.
    stopping = stop_requested()
    if await _first_of(runtime.beating, stopping) is runtime.beating:
        runtime.use_dispatcher(dispatcher, eager=eager)
        consumers.start()
        log.info("arq consumers on queues %s", consumers.queues)
    try:
        await stopping.wait()
        # A deploy: take no new jobs, let running ones finish within the grace
        # period, hand back the rest, mark this worker retired, exit 0.
        log.info("stopping: draining for up to %.0fs", drain_grace)
        consumers.pause()
        await runtime.stop(grace=drain_grace)
    finally:
        await consumers.stop()
        await pool.aclose()
    log.info("worker %s retired", runtime.worker_id)
    return 0


async def _first_of(*events: asyncio.Event) -> asyncio.Event:
    """The first of ``events`` to be set (the earliest listed if several are)."""
    waits = {asyncio.ensure_future(event.wait()): event for event in events}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return next(event for event in events if event.is_set())


async def _connect_patiently(redis_url: str) -> ArqRedis:
    """A worker started while Redis is away waits for it instead of exiting."""
    delay = 1.0
    while True:
        try:
            return await connect(redis_url)
        except (RedisError, OSError) as exc:
            log.warning("Redis unreachable at start-up (%s); retrying in %.0fs", exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)
