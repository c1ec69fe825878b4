"""A dispatcher that runs each job as soon as it is due by the test's clock
and holds the others until the clock reaches them. It knows exactly which
jobs are running, so a test can wait for the runtime to go quiet instead of
sleeping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from app.engine._clock import Clock
from app.engine._jobs import RETRACT, Job

log = logging.getLogger("repairbot.testing")


class StepDispatcher:
    def __init__(self, run_job: Callable[[Job], Awaitable[None]], clock: Clock) -> None:
        self._run_job = run_job
        self._clock = clock
        #: Jobs whose ``not_before`` the clock has not reached.
        self.held: dict[str, Job] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: dict[str, Job] = {}
        #: Exceptions jobs raised: the engine never lets one escape, so any is a bug.
        self.errors: list[BaseException] = []
        self.jobs_run = 0
        #: Called after each job ends (the environment wakes its waits).
        self.listeners: list[Callable[[Job], None]] = []

    async def enqueue(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            if job.kind == RETRACT:
                self.held.pop(job.job_id, None)
            elif job.job_id in self._running:
                # Sent again while it runs: what it loaded may predate the
                # change that sent it (a new event), so it runs once more after.
                self._again[job.job_id] = job
            elif job.job_id in self.held:
                continue  # deterministic ids: a double relay is one job
            elif job.not_before > self._clock():
                self.held[job.job_id] = job
            else:
                self._start(job)

    async def waiting(self, jobs: Sequence[Job]) -> set[str]:
        return set()

    def release_due(self) -> None:
        now = self._clock()
        for job_id, job in list(self.held.items()):
            if job.not_before <= now:
                del self.held[job_id]
                self._start(job)

    def _start(self, job: Job) -> None:
        task = asyncio.create_task(self._run(job), name=f"kit job {job.job_id}")
        self._running[job.job_id] = task

    async def _run(self, job: Job) -> None:
        try:
            await self._run_job(job)
        except Exception as exc:
            log.exception("job %s failed", job.job_id)
            self.errors.append(exc)
        finally:
            self._running.pop(job.job_id, None)
            again = self._again.pop(job.job_id, None)
            if again is not None:
                self._start(again)
            self.jobs_run += 1
            for listener in self.listeners:
                listener(job)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    async def next_finished(self) -> None:
        """Return when at least one running job has finished."""
        if self._running:
            await asyncio.wait(list(self._running.values()), return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.held.clear()
