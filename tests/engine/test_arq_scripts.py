"""The one-round-trip enqueue and take (app/engine/_arq_scripts.py) keep
arq's keys and rules, on the real Redis: what the dispatcher writes is a job
arq reads, a double send is one job, a job in progress or not yet due is not
started, a take takes no more jobs than asked and looks past jobs in
progress, and a server that lost the scripts gets them again."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from arq import ArqRedis
from arq.constants import in_progress_key_prefix
from arq.jobs import Job as ArqJob
from arq.jobs import JobStatus
from arq.worker import func

from app.engine._arq_dispatch import JOB_FUNCTION, ArqDispatcher, Consumer
from app.engine._arq_scripts import TAKE, TAKE_SCRIPT, Script
from app.engine._jobs import DEFAULT_QUEUE, Job
from app.engine._redis_channel import connect, dump_result, load_job, redis_settings

pytestmark = pytest.mark.redis


@pytest.fixture
async def pool(redis_url: str) -> AsyncIterator[ArqRedis]:
    redis = await connect(redis_url)
    await redis.flushdb()
    yield redis
    await redis.aclose()


def _job(job_id: str, not_before: float = 0.0) -> Job:
    return Job(job_id, "activity", "17", queue=DEFAULT_QUEUE, not_before=not_before)


async def _take(pool: ArqRedis, want: int, read: int = 100) -> dict[str, float]:
    """The jobs a consumer with ``want`` free slots takes: id -> score."""
    reply = await TAKE_SCRIPT(
        pool,
        [DEFAULT_QUEUE],
        [int(time.time() * 1000), read, want, 60_000, in_progress_key_prefix],
    )
    return {i.decode(): float(score) for i, score in zip(reply[0::2], reply[1::2], strict=True)}


async def test_an_enqueued_job_is_arqs_and_a_second_send_is_the_same_job(pool: ArqRedis) -> None:
    dispatcher = ArqDispatcher(pool)
    await dispatcher.enqueue([_job("j-1")])
    first_score = await pool.zscore(DEFAULT_QUEUE, "j-1")
    await dispatcher.enqueue([_job("j-1")])

    job = ArqJob("j-1", pool, _queue_name=DEFAULT_QUEUE, _deserializer=load_job)
    assert await job.status() == JobStatus.queued
    info = await job.info()
    assert info is not None
    assert (info.function, info.args) == (JOB_FUNCTION, ["activity", "17", "j-1"])
    assert await pool.zcard(DEFAULT_QUEUE) == 1
    assert await pool.zscore(DEFAULT_QUEUE, "j-1") == first_score
    ttl = await pool.pttl("arq:job:j-1")
    assert 3_500_000 < ttl <= 3_600_000  # JOB_EXPIRY past its due time


async def test_a_deferred_job_is_scored_at_its_time_and_not_started_before(
    pool: ArqRedis,
) -> None:
    due = time.time() + 30
    await ArqDispatcher(pool).enqueue([_job("later", not_before=due)])
    assert await pool.zscore(DEFAULT_QUEUE, "later") == pytest.approx(due * 1000, abs=1)
    assert await pool.pttl("arq:job:later") > 3_600_000 + 25_000
    assert await _take(pool, 1) == {}
    assert not await pool.exists(in_progress_key_prefix + "later")


async def test_a_job_is_started_once(pool: ArqRedis) -> None:
    await ArqDispatcher(pool).enqueue([_job("once")])
    taken = await _take(pool, 1)
    assert taken == {"once": await pool.zscore(DEFAULT_QUEUE, "once")}
    assert 0 < await pool.pttl(in_progress_key_prefix + "once") <= 60_000
    # In progress: a second consumer does not take it.
    assert await _take(pool, 1) == {}


async def test_a_take_takes_no_more_jobs_than_free_slots(pool: ArqRedis) -> None:
    await ArqDispatcher(pool).enqueue([_job(f"j-{i}") for i in range(3)])
    assert len(await _take(pool, 2)) == 2
    assert await _take(pool, 2) != {}  # the third was left for another consumer


async def test_a_take_looks_past_jobs_in_progress(pool: ArqRedis) -> None:
    # Jobs stay in arq's queue until they finish, so a busy (or dead)
    # consumer's jobs come first; a due job behind them is still found.
    await ArqDispatcher(pool).enqueue([_job(f"busy-{i}") for i in range(3)])
    assert len(await _take(pool, 3)) == 3
    await ArqDispatcher(pool).enqueue([_job("waiting")])
    assert list(await _take(pool, 1)) == ["waiting"]


async def test_a_script_the_server_does_not_know_is_sent_again(pool: ArqRedis) -> None:
    # A source no server has seen (its own SHA), rather than flushing the
    # script cache of a server other tests share.
    fresh = Script(TAKE + f"\n-- {time.time_ns()}\n")
    assert (await pool.script_exists(fresh.sha)) == [False]
    await ArqDispatcher(pool).enqueue([_job("loaded")])
    now = int(time.time() * 1000)
    reply = await fresh(pool, [DEFAULT_QUEUE], [now, 100, 1, 1000, in_progress_key_prefix])
    assert reply[0] == b"loaded"
    assert (await pool.script_exists(fresh.sha)) == [True]


async def _noop(ctx: dict[str, Any], kind: str, ref: str, job_id: str) -> None:
    return None


async def test_a_burst_consumer_takes_no_more_than_its_burst(
    pool: ArqRedis, redis_url: str
) -> None:
    await ArqDispatcher(pool).enqueue([_job(f"b-{i}") for i in range(3)])
    consumer = Consumer(
        functions=[func(_noop, name=JOB_FUNCTION)],
        redis_settings=redis_settings(redis_url),
        queue_name=DEFAULT_QUEUE,
        burst=True,
        max_burst_jobs=1,
        keep_result=0,
        job_serializer=dump_result,
        job_deserializer=load_job,
        handle_signals=False,
    )
    await consumer.async_run()  # burst: returns once its one job is done
    await consumer.close()
    assert consumer.jobs_complete == 1
    assert await pool.zcard(DEFAULT_QUEUE) == 2  # the other two left in the queue
