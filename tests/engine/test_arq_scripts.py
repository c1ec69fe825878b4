"""The one-round-trip enqueue, start and take (app/engine/_arq_scripts.py)
keep arq's keys and rules, on the real Redis: what the dispatcher writes is
a job arq reads, a double send is one job, a job in progress or not yet due
is not started or taken, a taken job leaves Redis whole, a take takes no
more jobs than the consumer's free slots, leaves arq's own jobs to arq's
start and reads past jobs in progress, and a server that lost the scripts
gets them again."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from arq.jobs import Job as ArqJob
from arq.jobs import JobStatus
from arq.worker import func

from app.engine._arq_dispatch import JOB_FUNCTION, ArqDispatcher, Consumer
from app.engine._arq_scripts import START, START_SCRIPT, TAKE_SCRIPT, Script
from app.engine._jobs import DEFAULT_QUEUE, ENGINE_JOB_PREFIXES, Job
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


async def _start(pool: ArqRedis, job_id: str) -> object:
    return await START_SCRIPT(
        pool,
        [in_progress_key_prefix + job_id, DEFAULT_QUEUE],
        [job_id, int(time.time() * 1000), 60_000],
    )


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
    assert await _start(pool, "later") is None
    assert not await pool.exists(in_progress_key_prefix + "later")


async def test_a_job_is_started_once(pool: ArqRedis) -> None:
    await ArqDispatcher(pool).enqueue([_job("once")])
    score = await _start(pool, "once")
    assert score is not None
    assert int(float(score)) == int(await pool.zscore(DEFAULT_QUEUE, "once") or 0)  # type: ignore[arg-type]
    assert 0 < await pool.pttl(in_progress_key_prefix + "once") <= 60_000
    # In progress: a second consumer does not take it.
    assert await _start(pool, "once") is None
    # Gone from the queue (finished): nothing to start.
    assert await _start(pool, "absent") is None


async def _take(pool: ArqRedis, free: int) -> tuple[dict[str, bytes], list[str]]:
    """What a consumer with ``free`` slots takes: the engine jobs' bytes by
    id, and the other ids it is to start with arq's start."""
    taken, others = await TAKE_SCRIPT(
        pool,
        [DEFAULT_QUEUE],
        [
            int(time.time() * 1000),
            100,
            free,
            job_key_prefix,
            retry_key_prefix,
            in_progress_key_prefix,
            *ENGINE_JOB_PREFIXES,
        ],
    )
    pairs = zip(taken[0::2], taken[1::2], strict=True)
    return {i.decode(): raw for i, raw in pairs}, [i.decode() for i in others]


async def test_a_job_is_taken_once_and_leaves_nothing_behind(pool: ArqRedis) -> None:
    await ArqDispatcher(pool).enqueue([_job("act:1:1")])
    await pool.set(retry_key_prefix + "act:1:1", 1)  # as a start under arq's own run_job leaves
    taken, others = await _take(pool, 8)
    assert (list(taken), others) == (["act:1:1"], [])
    assert load_job(taken["act:1:1"])["a"] == ["activity", "17", "act:1:1"]
    assert await pool.zcard(DEFAULT_QUEUE) == 0
    assert await pool.keys("*") == []  # no job, retry or in-progress key left
    assert await _take(pool, 8) == ({}, [])


async def test_a_take_takes_no_more_jobs_than_free_slots(pool: ArqRedis) -> None:
    await ArqDispatcher(pool).enqueue([_job(f"act:5:{i}") for i in range(3)])
    taken, _ = await _take(pool, 2)
    assert len(taken) == 2
    assert await pool.zcard(DEFAULT_QUEUE) == 1  # left for another consumer
    assert len((await _take(pool, 2))[0]) == 1


async def test_arqs_own_jobs_come_back_as_ids_and_take_a_slot(pool: ArqRedis) -> None:
    # The reconciler's cron is arq's job, started by arq's start and run by
    # arq's run_job: the take leaves it in Redis and counts its slot.
    dispatcher = ArqDispatcher(pool)
    await dispatcher.enqueue([_job("cron:reconcile:1")])
    await dispatcher.enqueue([_job("act:6:1")])
    await pool.zadd(DEFAULT_QUEUE, {"cron:reconcile:1": 1})  # first in line, whatever the clock
    assert await _take(pool, 1) == ({}, ["cron:reconcile:1"])
    assert await pool.exists(job_key_prefix + "cron:reconcile:1") == 1
    assert await pool.zcard(DEFAULT_QUEUE) == 2
    taken, others = await _take(pool, 2)
    assert (list(taken), others) == (["act:6:1"], ["cron:reconcile:1"])


async def test_a_job_not_yet_due_or_started_by_arq_is_not_taken(pool: ArqRedis) -> None:
    dispatcher = ArqDispatcher(pool)
    await dispatcher.enqueue([_job("act:2:1", not_before=time.time() + 30)])
    assert await _take(pool, 8) == ({}, [])
    # A worker of an earlier release started this one with arq's start: it is theirs.
    await dispatcher.enqueue([_job("act:3:1")])
    assert await _start(pool, "act:3:1") is not None
    assert await _take(pool, 8) == ({}, [])
    assert await pool.exists(job_key_prefix + "act:2:1", job_key_prefix + "act:3:1") == 2


async def test_a_take_reads_past_jobs_in_progress(pool: ArqRedis) -> None:
    # arq keeps a job it started in the queue until it finishes, so the
    # cron's run (or an older release's job) comes first; it takes no slot
    # and hides no due job behind it.
    dispatcher = ArqDispatcher(pool)
    await dispatcher.enqueue([_job("cron:reconcile:2")])
    assert await _start(pool, "cron:reconcile:2") is not None
    await dispatcher.enqueue([_job("act:7:1")])
    assert list((await _take(pool, 1))[0]) == ["act:7:1"]


async def test_a_queue_entry_whose_job_expired_is_dropped_and_takes_no_slot(
    pool: ArqRedis,
) -> None:
    await ArqDispatcher(pool).enqueue([_job("act:4:1")])
    await pool.delete(job_key_prefix + "act:4:1")
    await ArqDispatcher(pool).enqueue([_job("act:4:2")])
    assert list((await _take(pool, 1))[0]) == ["act:4:2"]
    assert await pool.zcard(DEFAULT_QUEUE) == 0


async def test_a_script_the_server_does_not_know_is_sent_again(pool: ArqRedis) -> None:
    # A source no server has seen (its own SHA), rather than flushing the
    # script cache of a server other tests share.
    fresh = Script(START + f"\n-- {time.time_ns()}\n")
    assert (await pool.script_exists(fresh.sha)) == [False]
    await ArqDispatcher(pool).enqueue([_job("loaded")])
    now = int(time.time() * 1000)
    score = await fresh(
        pool, [in_progress_key_prefix + "loaded", DEFAULT_QUEUE], ["loaded", now, 1000]
    )
    assert score is not None
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
