"""arq over Redis as the dispatch channel (the production path).

Job ids are deterministic (so a double relay is one job), arq's own retries
are off (``max_tries=1``: the database owns attempts), results are not kept
(so a job id can be dispatched again once its job has run), and workers poll
often. Workflow tasks go to one queue per workflow version; activities and
timers to the default queue.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from arq import ArqRedis
from arq.connections import RedisSettings
from arq.cron import cron
from arq.worker import Worker as ArqWorker
from arq.worker import func

from app.engine.jobs import DEFAULT_QUEUE, Job, workflow_queue
from app.engine.runtime import Runtime

JOB_FUNCTION = "run_job"


class ArqDispatcher:
    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool

    async def enqueue(self, jobs: Sequence[Job]) -> None:
        now = time.time()
        for job in jobs:
            defer = datetime.fromtimestamp(job.not_before, UTC) if job.not_before > now else None
            await self.pool.enqueue_job(
                JOB_FUNCTION,
                job.kind,
                job.ref,
                job.job_id,
                _job_id=job.job_id,
                _queue_name=job.queue,
                _defer_until=defer,
            )


async def run_job(ctx: dict[str, Any], kind: str, ref: str, job_id: str) -> None:
    runtime: Runtime = ctx["runtime"]
    await runtime.worker.run_job(Job(job_id, kind, ref, queue=""))


async def reconcile(ctx: dict[str, Any]) -> None:
    runtime: Runtime = ctx["runtime"]
    await runtime.reconciler.run_once()


def arq_workers(
    runtime: Runtime,
    redis_settings: RedisSettings,
    *,
    max_jobs: int = 8,
    poll_delay: float = 0.005,
    burst: bool = False,
    handle_signals: bool = True,
) -> list[ArqWorker]:
    """One arq worker for the default queue (activities, timers, reconciler
    cron) and one per workflow version this process has code for."""
    common: dict[str, Any] = {
        "functions": [func(run_job, name=JOB_FUNCTION, max_tries=1)],
        "redis_settings": redis_settings,
        "ctx": {"runtime": runtime},
        "max_jobs": max_jobs,
        "poll_delay": poll_delay,
        "keep_result": 0,
        "max_tries": 1,
        "burst": burst,
        "handle_signals": handle_signals,
        "job_timeout": 24 * 3600,  # activities enforce their own timeouts
    }
    workers = [
        ArqWorker(
            queue_name=DEFAULT_QUEUE,
            cron_jobs=[
                cron(
                    reconcile,
                    name="reconcile",
                    second=set(range(60)),
                    run_at_startup=True,
                    max_tries=1,
                    keep_result=0,
                )
            ],
            **common,
        )
    ]
    for name, version in sorted(runtime.registry.workflows):
        workers.append(ArqWorker(queue_name=workflow_queue(name, version), **common))
    return workers
