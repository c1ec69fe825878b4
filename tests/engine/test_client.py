"""The runtime's client (what the web process builds) and the store's threads."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.engine._activity_context import ActivityContext
from app.engine._client import RuntimeClient
from app.engine._context import WorkflowContext
from app.engine._db import make_engine
from app.engine._errors import WorkflowNotFound
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._store.async_store import StoreThreads, threads_for
from app.web import create_app
from handlers import build_router


@activity("double")
async def double(actx: ActivityContext, n: int) -> int:
    return 2 * n


@workflow("doubles")
async def doubles(ctx: WorkflowContext, n: int) -> int:
    await ctx.wait_signal("go")
    return int(await ctx.activity(double, n, step="double"))


def registry() -> Registry:
    return Registry.of([doubles], [double])


async def test_a_client_without_a_dispatcher_is_served_by_a_worker(
    db_engine: Engine, make_runtime: Any
) -> None:
    """The web process's client only writes; a worker's relay picks the work up."""
    client = RuntimeClient(db_engine, registry())
    assert not isinstance(client, Runtime)
    await make_runtime(registry())
    started = await client.start_workflow("doubles", "client-1", 21)
    for _ in range(500):
        run = await client.read(client.store.find_run, "client-1")
        if run is not None and not run.pending_task:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(WorkflowNotFound):
        await client.aquery("no-such-run", "status")
    assert await client.signal("client-1", "go", None, dedupe_key="go-1")
    run = await client.wait_for(started.run_id)
    assert (run.status, run.result) == ("completed", 42)


async def test_a_cancelled_caller_waits_for_its_store_call_to_finish() -> None:
    """A started call is never cut short: the caller sees its cancellation
    only once the call (its transaction) has finished."""
    threads = StoreThreads(2)
    entered, finished = threading.Event(), threading.Event()
    seen: list[bool] = []

    def slow_write() -> str:
        entered.set()
        time.sleep(0.3)
        finished.set()
        return "committed"

    async def caller() -> None:
        try:
            await threads.run(slow_write)
        except asyncio.CancelledError:
            seen.append(finished.is_set())
            raise

    task = asyncio.create_task(caller())
    await asyncio.to_thread(entered.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [True]
    threads.close()


def test_the_thread_pool_is_as_large_as_the_connection_pool(postgres_url: str) -> None:
    engine = make_engine(postgres_url, pool_size=7)
    try:
        assert threads_for(engine) == 7
        assert RuntimeClient(engine, registry()).threads.threads == 7
    finally:
        engine.dispose()


def test_only_the_worker_runtime_can_run_the_embedded_worker(db_engine: Engine) -> None:
    client = RuntimeClient(db_engine, registry())
    settings = Settings(github_webhook_secret="s")
    create_app(settings, client, router=build_router())  # the web process: a client is enough
    with pytest.raises(TypeError):
        create_app(settings, client, run_worker=True, router=build_router())
