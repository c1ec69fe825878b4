"""The doorbell on real Redis: consumers polling with a long delay start a job
when its queue rings, and a lost ring costs at most the poll delay.

Times here are correctness bounds with wide margins (a ring against a 5 s
poll), not speed measurements."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from arq import create_pool
from arq.worker import func
from redis.asyncio import Redis
from sqlalchemy import Engine

from app.engine._arq_dispatch import ArqConsumers, ArqDispatcher, Consumer
from app.engine._doorbell import Doorbell, channel, ring
from app.engine._jobs import DEFAULT_QUEUE, Job, activity_job, timer_job, workflow_task_job
from app.engine._redis_channel import connect, redis_settings
from app.engine._runtime import Runtime
from tests.engine.private_services import PrivateRedis
from tests.engine.test_workflows_basic import REGISTRY

pytestmark = pytest.mark.redis
on_sqlite = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

#: Without a ring, every hop through Redis would wait up to this long.
LONG_POLL = 5.0
#: A run of three steps makes several hops; on the ring it ends far sooner
#: than one poll delay, on the poll alone it cannot.
WITHIN = LONG_POLL / 2


class _RingsLost(ArqDispatcher):
    """Enqueues as the real dispatcher does; every ring is lost on the way."""

    def _to_ring(self, jobs: Sequence[Job], now_ms: int) -> set[str]:
        return set()


async def _consumers(
    url: str, engine: Engine, *, poll_delay: float, dispatcher: type[ArqDispatcher] = ArqDispatcher
) -> tuple[Runtime, ArqConsumers]:
    pool = await connect(url)
    # No relay within the test: a re-dispatch would ring and hide a lost ring.
    runtime = Runtime(engine, REGISTRY, relay_grace=600)
    runtime.use_dispatcher(dispatcher(pool), eager=False)
    consumers = ArqConsumers(runtime, redis_settings(url), poll_delay=poll_delay)
    consumers.start()
    await asyncio.wait_for(consumers.doorbell.subscribed.wait(), 10)
    await asyncio.sleep(0.3)  # every consumer made its first poll and now waits
    return runtime, consumers


async def _close(runtime: Runtime, consumers: ArqConsumers) -> None:
    await runtime.stop()
    await consumers.stop()
    dispatcher = runtime.dispatcher
    assert isinstance(dispatcher, ArqDispatcher)
    await dispatcher.pool.aclose()


async def _run_seconds(runtime: Runtime, run_id: str, *, timeout: float = 30) -> float:
    started = time.monotonic()
    await runtime.start_workflow("sequence", run_id, 3)
    run = await runtime.wait_for(run_id, timeout=timeout)
    assert (run.status, run.result) == ("completed", 3)
    return time.monotonic() - started


@pytest.fixture
async def ringing(db_engine: Engine, redis_url: str) -> AsyncIterator[Runtime]:
    runtime, consumers = await _consumers(redis_url, db_engine, poll_delay=LONG_POLL)
    yield runtime
    await _close(runtime, consumers)


@on_sqlite
async def test_a_job_starts_on_the_ring_not_the_poll(ringing: Runtime) -> None:
    assert await _run_seconds(ringing, "rung") < WITHIN


@on_sqlite
async def test_a_lost_ring_costs_at_most_the_poll_delay(db_engine: Engine, redis_url: str) -> None:
    poll = 0.5
    runtime, consumers = await _consumers(
        redis_url, db_engine, poll_delay=poll, dispatcher=_RingsLost
    )
    try:
        # Each hop waits for a poll; a consumer that only waited for rings
        # would never start the run (no relay either).
        # (Several hops of up to one poll each: far above a quarter poll in all.)
        assert await _run_seconds(runtime, "unrung", timeout=20) >= poll / 4
    finally:
        await _close(runtime, consumers)


@on_sqlite
async def test_the_doorbell_resubscribes_after_its_connection_is_killed(
    db_engine: Engine, tmp_path: Path
) -> None:
    server = PrivateRedis(tmp_path / "redis").start()
    runtime, consumers = await _consumers(server.url, db_engine, poll_delay=LONG_POLL)
    admin = Redis.from_url(server.url)
    try:
        # A private server: killing every subscriber touches no one else's.
        assert await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
        # Rings sent before the subscription is back are lost; the run goes
        # on by the poll or by the wake-up that follows a resubscription.
        await _run_seconds(runtime, "during", timeout=4 * LONG_POLL)
        await _until(lambda: consumers.doorbell.subscriptions >= 2)
        await asyncio.sleep(0.3)
        assert await _run_seconds(runtime, "after") < WITHIN
    finally:
        await admin.aclose()
        await _close(runtime, consumers)
        server.stop()


async def test_a_full_consumer_polls_again_when_a_slot_frees(redis_url: str) -> None:
    """Rung while all its slots are busy, a consumer skips the read; the slot
    that frees must wake it, or the job waits out the poll delay."""
    settings = redis_settings(redis_url)
    started: dict[str, float] = {}

    async def hold(ctx: dict[str, Any], name: str, seconds: float) -> None:
        started[name] = time.monotonic()
        await asyncio.sleep(seconds)

    bell = Doorbell(settings, ["full"])
    bell.start()
    consumer = Consumer(
        functions=[func(hold, name="hold")],
        queue_name="full",
        redis_settings=settings,
        max_jobs=1,
        poll_delay=LONG_POLL,
        handle_signals=False,
        doorbell=bell,
    )
    pool = await create_pool(settings)
    task = asyncio.create_task(consumer.async_run())
    try:
        await asyncio.wait_for(bell.subscribed.wait(), 10)
        await asyncio.sleep(0.3)
        await _enqueue(pool, "first", 1.0)
        await _until(lambda: "first" in started)
        await _enqueue(pool, "second", 0.0)  # rings while "first" holds the slot
        await _until(lambda: "second" in started, timeout=2 * LONG_POLL)
        assert started["second"] - started["first"] < WITHIN
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.close()
        await bell.stop()
        await pool.aclose()


async def _enqueue(pool: Any, name: str, seconds: float) -> None:
    await pool.enqueue_job("hold", name, seconds, _queue_name="full")
    await ring(pool, ["full"])


async def _until(condition: Callable[[], bool], *, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_the_dispatcher_rings_once_per_queue_for_due_jobs_only(redis_url: str) -> None:
    pool = await connect(redis_url)
    listener = Redis.from_url(redis_url)
    pubsub = listener.pubsub()
    database = redis_settings(redis_url).database
    await pubsub.psubscribe(channel(database, "*"))
    try:
        later = time.time() + 3600
        await ArqDispatcher(pool).enqueue(
            [
                activity_job(1, 1),
                activity_job(2, 1),
                workflow_task_job("run", 1, "wf-queue"),
                timer_job("run", 2, later),  # deferred: the poll will find it
                workflow_task_job("other", 1, "deferred-queue", not_before=later),
            ]
        )
        rung: list[bytes] = []
        while (message := await pubsub.get_message(timeout=0.5)) is not None:
            if message["type"] == "pmessage":
                rung.append(message["channel"])
        assert sorted(rung) == sorted(
            channel(database, q).encode() for q in (DEFAULT_QUEUE, "wf-queue")
        )
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await listener.aclose()
        await pool.aclose()
