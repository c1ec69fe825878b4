"""Dispatch channels. The database is the only truth; a dispatcher only makes
work start sooner. Losing a job (a crash, a Redis flush) delays work until the
relay or reconciler re-dispatches it; it never loses it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from app.engine._clock import Clock, system_clock
from app.engine._jobs import RETRACT, Job

log = logging.getLogger("repairbot.dispatch")


class Dispatcher(Protocol):
    async def enqueue(self, jobs: Sequence[Job]) -> None: ...

    async def waiting(self, jobs: Sequence[Job]) -> set[str]:
        """The ids among ``jobs`` (as last sent) that sit in the channel, due
        and untaken, and will run when a worker is free: the relay does not
        send those again. May raise; the relay then sends them all again."""


class InProcessDispatcher:
    """Runs jobs in this process on a bounded pool of asyncio tasks: the
    embedded default (SQLite plus one process, no Redis)."""

    def __init__(
        self,
        run_job: Callable[[Job], Awaitable[None]],
        *,
        concurrency: int = 8,
        clock: Clock = system_clock,
    ) -> None:
        self._run_job = run_job
        self._clock = clock
        self._concurrency = concurrency
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._known: set[str] = set()  # job ids queued, deferred or running
        self._consumers: list[asyncio.Task[None]] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.jobs_run = 0

    async def enqueue(self, jobs: Sequence[Job]) -> None:
        loop = asyncio.get_running_loop()
        now = self._clock()
        for job in jobs:
            if job.kind == RETRACT:
                self._retract(job.job_id)
                continue
            if job.job_id in self._known:
                continue  # deterministic ids: a double relay is one job
            self._known.add(job.job_id)
            delay = job.not_before - now
            if delay > 0:
                self._timers[job.job_id] = loop.call_later(delay, self._release, job)
            else:
                self._queue.put_nowait(job)

    async def waiting(self, jobs: Sequence[Job]) -> set[str]:
        # None: the embedded mode's relay copies lingering jobs as it always
        # did. (``_known`` could answer; a copy here costs one claim that finds
        # nothing, and one embedded process rarely builds a long backlog.)
        return set()

    def _retract(self, job_id: str) -> None:
        handle = self._timers.pop(job_id, None)
        if handle is not None:
            handle.cancel()
            self._known.discard(job_id)

    def _release(self, job: Job) -> None:
        self._timers.pop(job.job_id, None)
        self._queue.put_nowait(job)

    def start(self) -> None:
        for i in range(self._concurrency):
            self._consumers.append(asyncio.create_task(self._consume(), name=f"dispatch-{i}"))

    async def _consume(self) -> None:
        this = asyncio.current_task()
        # ``cancelling()``: a cancellation that a job absorbed (a worker hands
        # its attempt back and may not re-raise) still ends this consumer,
        # instead of leaving it parked on ``get()`` while ``stop()`` waits.
        while this is None or not this.cancelling():
            job = await self._queue.get()
            try:
                await self._run_job(job)
            except Exception:
                # The database still holds the work: the relay will offer it again.
                log.exception("job %s failed", job.job_id)
            finally:
                self._known.discard(job.job_id)
                self.jobs_run += 1
                self._queue.task_done()

    async def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._consumers:
            task.cancel()
        for task in self._consumers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._consumers.clear()
        self._known.clear()

    @property
    def idle(self) -> bool:
        return self._queue.empty() and not (self._known - set(self._timers))
