"""``repairbot example``: one durable workflow end to end, with live progress."""

from __future__ import annotations

import asyncio
import time

from activities.example import ExampleActivities
from app.config import Settings
from app.engine import SETTLED, Registry, Runtime, make_engine
from app.operations.migrate import upgrade
from app.workflows.example import WORKFLOWS, Survey, survey


async def run_example(settings: Settings, *, items: list[str]) -> int:
    upgrade(settings.database_url)
    registry = Registry.of(WORKFLOWS)  # only the example's: it needs nothing else
    registry.register_activities(ExampleActivities())
    runtime = Runtime(
        make_engine(settings.database_url),
        registry,
        worker_id=settings.worker_id,
        code_version=settings.code_version,
        reconcile_interval=0.2,
    )
    await runtime.start_in_process()
    started = time.monotonic()
    workflow_id = f"example-{int(time.time())}"
    try:
        result = await runtime.start(survey, Survey(items=items), id=workflow_id)
        print(f"started run {result.run_id} on {settings.database_url}")
        last = None
        while True:
            run = await runtime.read(runtime.store.find_run, workflow_id)
            if run is None:
                raise RuntimeError(f"run {workflow_id} vanished")
            progress = (
                await runtime.aquery(workflow_id, "progress") if run.status == "running" else None
            )
            line = f"  {time.monotonic() - started:5.2f}s  {run.status:10} {progress or ''}"
            if (run.status, progress) != last:
                print(line)
                last = (run.status, progress)
            if run.status in SETTLED:
                break
            await asyncio.sleep(0.05)
        print(f"\n{run.status}: {run.result or run.error}")
        print(f"history: {run.history_length} events; see `repairbot runs show {run.run_id}`")
        return 0 if run.status == "completed" else 1
    finally:
        await runtime.stop()
