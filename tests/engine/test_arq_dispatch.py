"""Dispatch through arq on the real Redis; the database stays the only truth."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from arq import create_pool
from arq.connections import RedisSettings
from arq.constants import job_key_prefix
from redis.asyncio import Redis
from sqlalchemy import Engine, func, select

from app.engine._arq_dispatch import ArqDispatcher, arq_workers
from app.engine._jobs import DEFAULT_QUEUE
from app.engine._runtime import Runtime
from app.engine._store.schema import outbox
from tests.engine.test_workflows_basic import REGISTRY
from tests.waiting import history_has, wait_until

pytestmark = pytest.mark.redis


@pytest.fixture(params=[False, True], ids=["dispatched", "eager"])
async def arq_runtime(
    db_engine: Engine, redis_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[Runtime]:
    """Workers on arq; ``eager``: they also run their own follow-up jobs (the
    production setting), ``dispatched``: every job goes through Redis."""
    settings = RedisSettings.from_dsn(redis_url)
    pool = await create_pool(settings)
    runtime = Runtime(db_engine, REGISTRY, relay_grace=0.3)
    runtime.use_dispatcher(ArqDispatcher(pool), eager=request.param)
    workers = arq_workers(runtime, settings, handle_signals=False, poll_delay=0.01)
    tasks = [asyncio.create_task(w.async_run()) for w in workers]
    yield runtime
    await runtime.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for worker in workers:
        # arq's close() gathers the job tasks it just cancelled (a reconcile
        # cron mid-pass, say) without return_exceptions; that is not our failure.
        with contextlib.suppress(asyncio.CancelledError):
            await worker.close()
    await pool.aclose()


async def test_workflow_runs_through_arq(arq_runtime: Runtime) -> None:
    await arq_runtime.start_workflow("sequence", "arq-seq", 4)
    run = await arq_runtime.wait_for("arq-seq", timeout=20)
    assert (run.status, run.result) == ("completed", 6)


async def test_redis_flush_mid_run_loses_nothing(arq_runtime: Runtime, redis_url: str) -> None:
    await arq_runtime.start_workflow("waiter", "arq-flush")
    await arq_runtime.wait_for("arq-flush", statuses=("running",))
    redis = Redis.from_url(redis_url)
    # Let the workflow reach its wait, then throw away everything Redis holds.
    await wait_until("the run waits", history_has(arq_runtime, "arq-flush", "timer_started"))
    await redis.flushdb()
    await arq_runtime.signal("arq-flush", "approve", {"ok": 1}, dedupe_key="s1")
    await redis.flushdb()  # the signal's job is gone too: the outbox relay brings it back
    await redis.aclose()
    run = await arq_runtime.wait_for("arq-flush", timeout=20)
    assert run.status == "completed"
    assert run.result["payload"] == {"ok": 1}


async def test_deterministic_job_ids_make_double_relay_one_job(
    arq_runtime: Runtime, redis_url: str
) -> None:
    assert isinstance(arq_runtime.dispatcher, ArqDispatcher)
    pool = arq_runtime.dispatcher.pool
    first = await pool.enqueue_job(
        "run_job",
        "workflow_task",
        "nope",
        "wft:x:1",
        _job_id="wft:x:1",
        _queue_name="q-test",
        _defer_by=60,
    )
    second = await pool.enqueue_job(
        "run_job",
        "workflow_task",
        "nope",
        "wft:x:1",
        _job_id="wft:x:1",
        _queue_name="q-test",
        _defer_by=60,
    )
    assert first is not None and second is None


async def _delayed_timer_jobs(redis: Redis) -> list[bytes]:
    queued = await redis.zrange(DEFAULT_QUEUE, 0, -1)
    keys = [k async for k in redis.scan_iter(job_key_prefix + "tmr:*")]
    return [j for j in queued if j.startswith(b"tmr:")] + keys


def _outbox_depth(runtime: Runtime) -> int:
    with runtime.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(outbox)).scalar_one())


@pytest.mark.parametrize("ending", ["signal", "cancel"])
async def test_a_timer_that_will_not_fire_leaves_no_outbox_row_or_delayed_job(
    arq_runtime: Runtime, redis_url: str, ending: str
) -> None:
    """The wait's 30 s timer is cancelled by the signal (or dropped with the
    cancelled run): its outbox row and its delayed arq job go with it, so the
    outbox depth returns to 0 instead of holding the row until it would fire."""
    redis = Redis.from_url(redis_url)
    workflow_id = f"tidy-{ending}"
    await arq_runtime.start_workflow("waiter", workflow_id)

    async def timer_waiting() -> bool:
        return bool(await _delayed_timer_jobs(redis)) and _outbox_depth(arq_runtime) == 1

    deadline = asyncio.get_running_loop().time() + 20
    while not await timer_waiting():
        assert asyncio.get_running_loop().time() < deadline, "the wait's timer never got queued"
        await asyncio.sleep(0.02)

    if ending == "signal":
        await arq_runtime.signal(workflow_id, "approve", {"ok": 1}, dedupe_key="s1")
    else:
        await arq_runtime.cancel(workflow_id, "test")
    run = await arq_runtime.wait_for(workflow_id, timeout=20)
    assert run.status == ("completed" if ending == "signal" else "cancelled")

    deadline = asyncio.get_running_loop().time() + 10
    while _outbox_depth(arq_runtime) or await _delayed_timer_jobs(redis):
        assert asyncio.get_running_loop().time() < deadline, (
            f"left behind: outbox {_outbox_depth(arq_runtime)}, "
            f"redis {await _delayed_timer_jobs(redis)}"
        )
        await asyncio.sleep(0.02)
    await redis.aclose()


async def test_in_process_stop_ends_a_consumer_whose_job_absorbed_the_cancel() -> None:
    """A job may absorb its cancellation (an activity that cleans up and
    returns): the consumer must still end, or ``stop()`` waits forever."""
    import asyncio

    from app.engine._dispatch import InProcessDispatcher
    from app.engine._jobs import Job, workflow_task_job

    started = asyncio.Event()

    async def absorbing(job: Job) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return  # swallowed on purpose

    dispatcher = InProcessDispatcher(absorbing, concurrency=1)
    dispatcher.start()
    await dispatcher.enqueue([workflow_task_job("run-1", 1, "default")])
    await asyncio.wait_for(started.wait(), 10)
    consumers = list(dispatcher._consumers)
    # stop() suppresses CancelledError while it waits, so a bounded wait on it
    # can return without the consumer having ended: check the consumer itself.
    stopping = asyncio.ensure_future(dispatcher.stop())
    await asyncio.wait(consumers, timeout=10)
    assert all(task.done() for task in consumers), "a consumer outlived stop()"
    await asyncio.wait_for(stopping, 10)
