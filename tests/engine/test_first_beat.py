"""A worker takes no job before its first liveness beat has committed.

The others judge a silent worker by its liveness row, so an attempt claimed
by a worker that has no row yet, and then dies, is invisible to them: it would
wait out its start-to-close timeout (minutes) instead of the worker silence.
Seen once in CI as tests/engine/test_crash_liveness.py timing out, on a loaded
machine, when the killed worker had claimed its activity 15 ms after it came
up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app.engine._activity_context import ActivityContext
from app.engine._arq_dispatch import ArqDispatcher
from app.engine._context import WorkflowContext
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._serve import serve_arq

#: What happened, in order: "beat" once the first beat committed, then the activity.
events: list[str] = []


@activity("first-beat-echo")
async def echo(actx: ActivityContext, value: int) -> int:
    events.append("activity")
    return value


@workflow("first-beat-one")
async def one(ctx: WorkflowContext, value: int) -> int:
    result: int = await ctx.activity(echo, value, step="only")
    return result


REGISTRY = Registry.of([one], [echo])
#: How long the first beat is held while the run's job waits: a run that was
#: not held back would finish in a few tens of milliseconds.
HELD = 1.0


def _hold_first_beat(rt: Runtime) -> threading.Event:
    """The store's first beat waits for the returned event; every beat that
    commits is recorded in ``events``."""
    release = threading.Event()
    original = rt.store.beat

    def held_beat(*args: Any, **kwargs: Any) -> None:
        release.wait(30)
        original(*args, **kwargs)
        if "beat" not in events:
            events.append("beat")

    rt.store.beat = held_beat  # type: ignore[method-assign]
    return release


async def test_no_job_is_taken_before_the_first_beat(db_engine: Engine) -> None:
    events.clear()
    rt = Runtime(db_engine, REGISTRY, reconcile_interval=0.05, relay_grace=0.2)
    release = _hold_first_beat(rt)
    await rt.start_in_process()  # start-up itself does not wait for the beat
    try:
        await rt.start_workflow("first-beat-one", "first-beat-1", 5)
        waiting = asyncio.create_task(rt.wait_for("first-beat-1"))
        done, _ = await asyncio.wait({waiting}, timeout=HELD)
        assert not done and events == []  # the job waits for the beat
        release.set()
        run = await waiting
    finally:
        release.set()
        await rt.stop()
    assert (run.status, run.result) == ("completed", 5)
    assert events == ["beat", "activity"]


async def test_arq_consumers_start_after_the_first_beat(db_engine: Engine, redis_url: str) -> None:
    """The same for a worker that serves arq's queues (app/engine/_serve.py)."""
    events.clear()
    rt = Runtime(db_engine, REGISTRY, reconcile_interval=0.05, relay_grace=0.2)
    release = _hold_first_beat(rt)
    serving = asyncio.create_task(
        serve_arq(rt, redis_url, concurrency=2, reconcile_interval=0.05, drain_grace=0.1)
    )
    try:
        while not isinstance(rt.dispatcher, ArqDispatcher):
            await asyncio.sleep(0.01)  # until serve_arq has connected and set its dispatcher
        await rt.start_workflow("first-beat-one", "first-beat-arq", 6)
        waiting = asyncio.create_task(rt.wait_for("first-beat-arq"))
        done, _ = await asyncio.wait({waiting}, timeout=HELD)
        assert not done and events == []  # the job waits in Redis for the beat
        release.set()
        run = await waiting
    finally:
        release.set()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await rt.stop()
    assert (run.status, run.result) == ("completed", 6)
    assert events == ["beat", "activity"]


async def test_a_worker_stopped_before_its_first_beat_exits_cleanly(
    db_engine: Engine, redis_url: str
) -> None:
    """A deploy's SIGTERM reaches a worker still waiting for the database
    (its first beat): it drains and exits 0 without having taken a job."""
    events.clear()
    rt = Runtime(db_engine, REGISTRY, reconcile_interval=0.05, relay_grace=0.2)
    refused: list[bool] = []

    def database_away(*args: Any, **kwargs: Any) -> None:
        refused.append(True)
        raise OperationalError("UPDATE workers", {}, ConnectionError("connection refused"))

    rt.store.beat = database_away  # type: ignore[method-assign]
    serving = asyncio.create_task(
        serve_arq(rt, redis_url, concurrency=2, reconcile_interval=0.05, drain_grace=0.1)
    )
    try:
        while not refused:
            await asyncio.sleep(0.01)  # serve_arq listens for signals before the first beat
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, 10) == 0
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
    assert events == [] and not rt.beating.is_set()
