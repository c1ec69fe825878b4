"""The reconciler: one idempotent pass that repairs whatever a crash, a lost
job or the passage of time left behind. Safe on every worker at once: every
action is a conditional update, and re-dispatch uses deterministic job ids.

Recovery re-enters the normal path: an expired lease is recorded as a failed
attempt exactly as a worker would record it, and the retry goes through the
same claim as any other attempt.

Passes are not only periodic: each pass also reads when the next thing falls
due (a lease, a timer, a silent worker's limit; see
``app/engine/_store/due.py``) and the loop sleeps until then if that comes
before the interval. A SIGKILLed worker's attempt is thus released when its
silence reaches the setting, not up to one interval later. Every reconciler
wakes for the same deadline; the conditional updates let one of them act.

The relay asks the channel before it sends a lingering job again: a job that
merely waits in a queue behind busy workers will run, and a copy of it would
only queue too. Whatever goes wrong while asking (an error, no answer within
:data:`ASK_TIMEOUT`) counts as "not waiting": the relay errs toward a
harmless copy, never toward work that nobody will pick up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field

from app.engine._errors import StaleLease
from app.engine._jobs import Job
from app.engine._store import Lingering, Store
from app.engine._store.async_store import StoreThreads

log = logging.getLogger("repairbot.reconciler")

#: Wake this long after a deadline, not on it: the pass compares strictly
#: (``lease_expires_at < now``) and asyncio may wake a clock tick early.
DUE_MARGIN = 0.002
#: The shortest sleep between passes. When something is already due again
#: (more due rows than one pass takes, a deadline that fell due during the
#: pass) passes follow each other this closely, not back to back: at most
#: 20 a second, at the cost of at most 50 ms on such a deadline.
MIN_WAIT = 0.05

#: Which of these jobs merely wait in the channel (queued, not taken)?
WaitingJobs = Callable[[Sequence[Job]], Awaitable[Collection[str]]]
#: Seconds the relay waits for the channel's answer before it re-sends anyway.
ASK_TIMEOUT = 2.0


async def none_waiting(jobs: Sequence[Job]) -> Collection[str]:
    """A channel that cannot tell: every lingering job is sent again."""
    return ()


@dataclass
class ReconcileReport:
    leases_expired: int = 0
    schedules_timed_out: int = 0
    timers_fired: int = 0
    deadlines_enforced: int = 0
    jobs_redispatched: int = 0
    #: Lingering outbox rows left alone because their job waits in the channel.
    jobs_waiting: int = 0
    jobs: list[Job] = field(default_factory=list)
    #: When the next lease, timer or worker silence falls due (epoch seconds).
    next_due: float | None = None
    #: Outbox rows for the relay to look at (the channel is asked about them).
    lingering: list[Lingering] = field(default_factory=list)


class Reconciler:
    def __init__(
        self,
        store: Store,
        sink: Callable[[list[Job]], Awaitable[None]],
        *,
        waiting: WaitingJobs = none_waiting,
        relay_grace: float = 2.0,
        worker_silence: float = 15.0,
        clock: Callable[[], float] = time.time,
        threads: StoreThreads | None = None,
    ) -> None:
        self.store = store
        self.threads = threads or StoreThreads.for_engine(store.engine)
        self.sink = sink
        self.waiting = waiting
        self.relay_grace = relay_grace
        self.worker_silence = worker_silence
        self.clock = clock
        self._task: asyncio.Task[None] | None = None
        #: Jobs this reconciler sent again (lost, or waiting past the grace).
        self.redispatched = 0

    async def run_once(self) -> ReconcileReport:
        # The whole pass is a series of short transactions: one hop to the
        # store's threads for all of them keeps the event loop free throughout
        # (a second one, after asking the channel, only if jobs linger).
        now = self.clock()
        report = await self.threads.run(self._repair, now)
        if report.lingering:
            await self._relay(report, now)
        self.redispatched += report.jobs_redispatched
        if report.jobs:
            await self.sink(report.jobs)
        return report

    def _repair(self, now: float) -> ReconcileReport:
        store, report = self.store, ReconcileReport()
        # Expired leases, silent workers and due timers are exactly what
        # next_due looks at: while it lies ahead (most passes) their three
        # queries would find nothing, so one statement stands in for them.
        due = store.next_due(silent_for=self.worker_silence)
        fell_due = due is not None and due <= now
        if fell_due:
            self._release_and_fire(report, now)
        for task_id, error_type in store.expired_schedules(now):
            jobs = store.time_out_task(task_id, error_type)
            report.schedules_timed_out += bool(jobs)
            report.jobs += jobs
        deadline_jobs = store.enforce_deadlines(now)
        report.deadlines_enforced = len(deadline_jobs)
        report.jobs += deadline_jobs
        report.lingering = store.lingering_jobs(now, grace=self.relay_grace)
        stale = store.runnable_without_job(now - self.relay_grace)
        report.jobs_redispatched = len(stale)
        report.jobs += stale
        if fell_due or report.jobs or report.schedules_timed_out:
            # Read again, so what this pass changed (a released lease) is not
            # reported as due; a pass that changed nothing keeps the first read.
            due = store.next_due(silent_for=self.worker_silence)
        report.next_due = due
        return report

    def _release_and_fire(self, report: ReconcileReport, now: float) -> None:
        """Fail the attempts whose lease ran out or whose worker fell silent;
        fire the due timers."""
        store = self.store
        lost = store.expired_leases(now)
        lost += store.leases_of_lost_workers(now, silent_for=self.worker_silence)
        for task_id, token, failure in lost:
            try:
                report.jobs += store.fail_activity(task_id, token, failure)
                report.leases_expired += 1
            except StaleLease:
                pass  # the attempt finished or another reconciler got there first
        for run_id, cmd in store.due_timers(now):
            jobs = store.fire_timer(run_id, cmd)
            report.timers_fired += bool(jobs)
            report.jobs += jobs

    async def _relay(self, report: ReconcileReport, now: float) -> None:
        """Send again the lingering jobs that are not merely waiting in the channel."""
        waiting = await self._ask_waiting([row.last_sent for row in report.lingering])
        again = await self.threads.run(
            self.store.relay_lingering,
            report.lingering,
            now,
            grace=self.relay_grace,
            waiting=waiting,
        )
        report.jobs_waiting = sum(row.last_sent.job_id in waiting for row in report.lingering)
        report.jobs_redispatched += len(again)
        report.jobs += again

    async def _ask_waiting(self, jobs: list[Job]) -> Collection[str]:
        try:
            return await asyncio.wait_for(self.waiting(jobs), ASK_TIMEOUT)
        except Exception as exc:  # TimeoutError, RedisError, OSError, ...
            log.warning("could not ask the channel which jobs wait (%r); sending all again", exc)
            return ()

    def start(self, interval: float) -> None:
        self._task = asyncio.create_task(self._loop(interval), name="reconciler")

    async def _loop(self, interval: float) -> None:
        while True:
            wait = interval
            try:
                report = await self.run_once()
                wait = self.wait_after(report, interval)
            except Exception:
                log.exception("reconciler pass failed; next pass in %.1fs", interval)
            await asyncio.sleep(wait)

    def wait_after(self, report: ReconcileReport, interval: float) -> float:
        """Seconds to sleep after a pass: until the next deadline, at most ``interval``.

        The deadlines are wall-clock epoch seconds (every process writes them
        with its own ``time.time()``), so the wait is taken against
        ``self.clock``, the clock the pass compares them with; the sleep itself
        runs on the loop's monotonic clock, which is right for a relative wait.
        A wall-clock step can only make one wake early (the pass finds nothing
        and computes the wait again) or late (by at most ``interval``)."""
        if report.next_due is None:
            return interval
        until_due = report.next_due + DUE_MARGIN - self.clock()
        return min(interval, max(MIN_WAIT, until_due))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
