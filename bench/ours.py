"""Our side of a case: N sequential no-op activities through the runtime,
dispatched in-process or through arq over Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker as ArqWorker
from redis.asyncio import Redis
from sqlalchemy import Engine

from app.engine._activity_context import ActivityContext
from app.engine._arq_dispatch import ArqDispatcher, arq_queues, arq_workers
from app.engine._context import WorkflowContext
from app.engine._db import make_engine
from app.engine._doorbell import Doorbell
from app.engine._registry import Registry, activity, workflow
from app.engine._replay import WorkflowTaskResult
from app.engine._runtime import Runtime
from app.engine._store import RunRow, Store
from app.operations.migrate import upgrade
from bench.databases import fresh_database
from bench.spec import ARQ, ARQ_DISPATCHED, INPROCESS, Case, CaseResult, Stopwatch, Timing

WORKFLOW = "bench-steps"
#: A run that has not finished after this long is broken, not slow.
RUN_TIMEOUT = 600.0


@activity("bench-noop")
async def noop(actx: ActivityContext, i: int) -> int:
    return i


@workflow(WORKFLOW)
async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.activity(noop, i, step=f"s{i}")
    return n


REGISTRY = Registry.of([steps], [noop])


class CompletionWatch:
    """Learns that a run ended the moment its final workflow task commits.

    Polling the database (``Runtime.wait_for``) would add up to one poll
    interval to every measurement and put extra reads on the same database
    and event loop; wrapping the store's commit costs nothing measurable.
    """

    def __init__(self, store: Store) -> None:
        self._ended: dict[str, asyncio.Event] = {}
        original = store.commit_workflow_task
        original_fused = store.complete_and_continue

        def commit(run: RunRow, step: WorkflowTaskResult, **kwargs: Any) -> Any:
            jobs = original(run, step, **kwargs)
            if jobs is not None and step.outcome is not None:
                self._event(run.workflow_id).set()
            return jobs

        # The final step usually commits fused with the last completion.
        def fused(
            claim: Any,
            result: Any,
            run: RunRow,
            completed: Any,
            step: WorkflowTaskResult,
            **kwargs: Any,
        ) -> Any:
            done = original_fused(claim, result, run, completed, step, **kwargs)
            if done is not None and step.outcome is not None:
                self._event(run.workflow_id).set()
            return done

        store.commit_workflow_task = commit  # type: ignore[method-assign]
        store.complete_and_continue = fused  # type: ignore[method-assign]

    def _event(self, workflow_id: str) -> asyncio.Event:
        return self._ended.setdefault(workflow_id, asyncio.Event())

    async def wait(self, workflow_id: str) -> None:
        await asyncio.wait_for(self._event(workflow_id).wait(), RUN_TIMEOUT)


async def timed_run(runtime: Runtime, watch: CompletionWatch, workflow_id: str, n: int) -> Timing:
    """From the start request to the durable commit of the run's result."""
    stopwatch = Stopwatch()
    await runtime.start_workflow(WORKFLOW, workflow_id, n)
    await watch.wait(workflow_id)
    timing = stopwatch.stop()
    _check_completed(runtime, workflow_id, n)
    return timing


def _check_completed(runtime: Runtime, workflow_id: str, n: int) -> None:
    # Outside the timed region: a fast wrong answer must not count as a result.
    run = runtime.store.find_run(workflow_id)
    if run is None or (run.status, run.result) != ("completed", n):
        state = (run.status, run.result) if run else "absent"
        raise RuntimeError(f"{workflow_id} did not complete with {n}: {state}")


async def run_case(case: Case) -> CaseResult:
    result = CaseResult(case)
    with fresh_database(case.db, admin_url=case.postgres_url) as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            async with started_runtime(case, engine) as runtime:
                watch = CompletionWatch(runtime.store)
                # Warm-up: connections (and their server backends), statement
                # caches, imports and the page cache, so no measured run pays
                # for them.
                await timed_run(runtime, watch, "warmup", case.warmup_n)
                for k in range(case.repeat):
                    result.record(await timed_run(runtime, watch, f"run-{k}", case.n))
                result.notes = _notes(runtime)
        finally:
            engine.dispose()
    return result


def _notes(runtime: Runtime) -> dict[str, Any]:
    cache = runtime.worker.cache
    return {"execution_cache_hits": cache.hits, "execution_cache_misses": cache.misses}


@asynccontextmanager
async def started_runtime(case: Case, engine: Engine) -> AsyncIterator[Runtime]:
    runtime = Runtime(engine, REGISTRY, worker_id="bench")
    if case.dispatch == INPROCESS:
        await runtime.start_in_process()
        try:
            yield runtime
        finally:
            await runtime.stop()
    elif case.dispatch in (ARQ, ARQ_DISPATCHED):
        async with _arq_dispatch(case, runtime, eager=case.dispatch == ARQ):
            yield runtime
    else:
        raise ValueError(f"unknown dispatch {case.dispatch!r}")


@asynccontextmanager
async def _arq_dispatch(case: Case, runtime: Runtime, *, eager: bool) -> AsyncIterator[None]:
    """The production wiring of app/main/worker_process.py (ArqDispatcher + arq_workers),
    with the workers on this event loop so one process holds the whole
    measurement. ``eager=False`` sends every job through Redis."""
    await _empty_redis(case.redis_url)
    settings = RedisSettings.from_dsn(case.redis_url)
    pool = await create_pool(settings)
    runtime.use_dispatcher(ArqDispatcher(pool), eager=eager)
    # As app/main/worker_process.py does: the reconciler judges leases by it.
    runtime.start_liveness()
    extra: dict[str, Any] = {}
    if case.arq_poll_delay is not None:
        extra["poll_delay"] = case.arq_poll_delay
    # As ArqConsumers does: consumers wake on the dispatcher's rings.
    doorbell = Doorbell(settings, arq_queues(runtime))
    doorbell.start()
    await doorbell.subscribed.wait()
    workers = arq_workers(runtime, settings, handle_signals=False, doorbell=doorbell, **extra)
    tasks = [asyncio.create_task(w.async_run()) for w in workers]
    try:
        yield
    finally:
        await _drain(workers)
        await _cancel_all(tasks)
        for worker in workers:
            await _close(worker)
        await doorbell.stop()
        await pool.aclose()
        await runtime.stop()


async def _drain(workers: list[ArqWorker], timeout: float = 10.0) -> None:
    # The run's last workflow-task job is still finishing (arq bookkeeping)
    # when the watch fires; let it end rather than cancel it.
    in_flight = [t for w in workers for t in w.tasks.values() if not t.done()]
    if in_flight:
        await asyncio.wait(in_flight, timeout=timeout)


async def _close(worker: ArqWorker) -> None:
    """arq's ``Worker.close`` cancels in-flight jobs (the reconciler cron may
    have just started one) and then gathers them without
    ``return_exceptions``, so it raises their CancelledError. Swallow that
    one, never a cancellation of this task itself."""
    try:
        await worker.close()
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def _empty_redis(url: str) -> None:
    # A case starts with an empty queue: no jobs left over from an earlier case.
    client = Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def run(case: Case) -> CaseResult:
    return asyncio.run(run_case(case))
