"""The reconciler: one idempotent pass that repairs whatever a crash, a lost
job or the passage of time left behind. Safe on every worker at once: every
action is a conditional update, and re-dispatch uses deterministic job ids.

Recovery re-enters the normal path: an expired lease is recorded as a failed
attempt exactly as a worker would record it, and the retry goes through the
same claim as any other attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.engine.errors import StaleLease
from app.engine.jobs import Job
from app.engine.store import Store
from app.engine.store.async_store import StoreThreads

log = logging.getLogger("repairbot.reconciler")


@dataclass
class ReconcileReport:
    leases_expired: int = 0
    schedules_timed_out: int = 0
    timers_fired: int = 0
    deadlines_enforced: int = 0
    jobs_redispatched: int = 0
    jobs: list[Job] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        store: Store,
        sink: Callable[[list[Job]], Awaitable[None]],
        *,
        relay_grace: float = 2.0,
        worker_silence: float = 15.0,
        clock: Callable[[], float] = time.time,
        threads: StoreThreads | None = None,
    ) -> None:
        self.store = store
        self.threads = threads or StoreThreads.for_engine(store.engine)
        self.sink = sink
        self.relay_grace = relay_grace
        self.worker_silence = worker_silence
        self.clock = clock
        self._task: asyncio.Task[None] | None = None
        #: Jobs this reconciler sent again (lost, or waiting past the grace).
        self.redispatched = 0

    async def run_once(self) -> ReconcileReport:
        # The whole pass is a series of short transactions: one hop to the
        # store's threads for all of them keeps the event loop free throughout.
        report = await self.threads.run(self._repair, self.clock())
        self.redispatched += report.jobs_redispatched
        if report.jobs:
            await self.sink(report.jobs)
        return report

    def _repair(self, now: float) -> ReconcileReport:
        store, report = self.store, ReconcileReport()
        lost = store.expired_leases(now)
        lost += store.leases_of_lost_workers(now, silent_for=self.worker_silence)
        for task_id, token, failure in lost:
            try:
                report.jobs += store.fail_activity(task_id, token, failure)
                report.leases_expired += 1
            except StaleLease:
                pass  # the attempt finished or another reconciler got there first
        for task_id, error_type in store.expired_schedules(now):
            jobs = store.time_out_task(task_id, error_type)
            report.schedules_timed_out += bool(jobs)
            report.jobs += jobs
        for run_id, cmd in store.due_timers(now):
            jobs = store.fire_timer(run_id, cmd)
            report.timers_fired += bool(jobs)
            report.jobs += jobs
        deadline_jobs = store.enforce_deadlines(now)
        report.deadlines_enforced = len(deadline_jobs)
        report.jobs += deadline_jobs
        stale = store.lingering_jobs(now, grace=self.relay_grace)
        stale += store.runnable_without_job(now - self.relay_grace)
        report.jobs_redispatched = len(stale)
        report.jobs += stale
        return report

    def start(self, interval: float) -> None:
        self._task = asyncio.create_task(self._loop(interval), name="reconciler")

    async def _loop(self, interval: float) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("reconciler pass failed; next pass in %.1fs", interval)
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
