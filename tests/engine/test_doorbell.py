"""The doorbell on real Redis: consumers polling with a long delay start a job
when its queue rings, and a lost ring costs at most the poll delay.

Times here are correctness bounds with wide margins (a ring against a 5 s
poll), not speed measurements."""

from __future__ import annotations

import asyncio
import contextlib
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


class _CountingFullPolls(Consumer):
    full_polls = 0

    async def _poll_iteration(self) -> None:
        # Counted before the poll's first await: by the time the test sees
        # the count, this poll has found no free slot and will take nothing.
        if self.job_counter >= self.max_jobs:
            self.full_polls += 1
        await super()._poll_iteration()


@contextlib.asynccontextmanager
async def _lone_consumer(
    kind: type[Consumer], redis_url: str, queue: str, max_jobs: int, hold: Callable[..., Any]
) -> AsyncIterator[tuple[Any, Doorbell, Any]]:
    """A consumer of ``queue`` running arq's ``hold`` jobs, with its doorbell
    subscribed and an hour's poll delay: a job starts only when a ring or a
    wake makes it poll. Yields the consumer, its doorbell and a pool."""
    settings = redis_settings(redis_url)
    bell = Doorbell(settings, [queue])
    bell.start()
    consumer = kind(
        functions=[func(hold, name="hold")],
        queue_name=queue,
        redis_settings=settings,
        max_jobs=max_jobs,
        poll_delay=3600,
        handle_signals=False,
        doorbell=bell,
    )
    pool = await create_pool(settings)
    task = asyncio.create_task(consumer.async_run())
    try:
        await asyncio.wait_for(bell.subscribed.wait(), 10)
        yield consumer, bell, pool
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.close()
        await bell.stop()
        await pool.aclose()


async def test_a_full_consumer_polls_again_when_a_slot_frees(redis_url: str) -> None:
    """Rung while all its slots are busy, a consumer skips the read; the slot
    that frees must wake it, or the job waits out the poll delay. The delay
    here is an hour, so the second job starts only if the freed slot woke
    the consumer: the test waits on that, not on a time window (it once
    asserted "within 2.5 s of the first", a margin a loaded full run could
    eat on its own)."""
    started: set[str] = set()
    release = asyncio.Event()

    async def hold(ctx: dict[str, Any], name: str, held: bool) -> None:
        started.add(name)
        if held:
            await release.wait()

    async with _lone_consumer(_CountingFullPolls, redis_url, "full", 1, hold) as (
        consumer,
        bell,
        pool,
    ):
        await _enqueue(pool, "first", True)
        await _until(lambda: "first" in started)
        await pool.enqueue_job("hold", "second", False, _queue_name="full")
        # Rung while "first" holds the slot (rung in-process, so that the
        # poll it causes can be told apart from any poll already under way).
        polls = consumer.full_polls
        bell.wake("full")
        await _until(lambda: consumer.full_polls > polls)
        release.set()
        await _until(lambda: "second" in started, timeout=60)


class _SlotFreesDuringTake(Consumer):
    """Frees a slot (by releasing the job ``free_first`` names) while its
    next take is on its way, and takes only once the slot is free."""

    free_first: asyncio.Event | None = None

    async def _take(self, free: int) -> int:
        if self.free_first is not None:
            release, self.free_first = self.free_first, None
            counter = self.job_counter
            release.set()
            await _until(lambda: self.job_counter < counter)
        return await super()._take(free)


async def test_a_slot_that_frees_during_a_take_is_filled_at_once(redis_url: str) -> None:
    """A take asks for as many jobs as the consumer has free slots. A slot
    that frees while the take is on its way finds nothing left behind to
    wake the consumer for; if the take then fills its count and leaves a
    due job in Redis, the consumer must poll again at once, not wait out
    the poll delay (an hour here) with a slot idle. Once cost a worker half
    its throughput (docs/benchmarks.md, "The poll and the take in one script")."""
    started: set[str] = set()
    released = {name: asyncio.Event() for name in ("a", "b", "c")}

    async def hold(ctx: dict[str, Any], name: str) -> None:
        started.add(name)
        await released[name].wait()

    async with _lone_consumer(_SlotFreesDuringTake, redis_url, "slots", 2, hold) as (
        consumer,
        bell,
        pool,
    ):
        try:
            await pool.enqueue_job("hold", "a", _queue_name="slots")
            await ring(pool, ["slots"])
            await _until(lambda: "a" in started)
            # One slot free, two jobs due; "a" ends during the take, which
            # then takes one of them (its count) and leaves the other behind.
            await pool.enqueue_job("hold", "b", _queue_name="slots")
            await pool.enqueue_job("hold", "c", _queue_name="slots")
            consumer.free_first = released["a"]
            bell.wake("slots")
            await _until(lambda: {"b", "c"} <= started)
        finally:
            for event in released.values():
                event.set()
            # The jobs end before the consumer is cancelled (it would cancel them).
            await asyncio.wait_for(asyncio.gather(*consumer.tasks.values()), 15)


async def _enqueue(pool: Any, name: str, held: bool) -> None:
    await pool.enqueue_job("hold", name, held, _queue_name="full")
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
