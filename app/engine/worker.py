"""Executes jobs: workflow tasks, activity attempts and timer firings.

The same code runs under every dispatcher (in-process or arq): a job only
names what to look at; the database says whether there is anything to do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from app.engine.activity_context import ActivityContext, Dependencies
from app.engine.commands import Event
from app.engine.errors import ActivityFailure, StaleLease
from app.engine.faults import FaultPoints
from app.engine.jobs import ACTIVITY, TIMER, WORKFLOW_TASK, Job, workflow_queue
from app.engine.registry import Absent, Found, Registry, Unknown
from app.engine.replay import WorkflowExecution, json_problem
from app.engine.store import Claim, Failure, RunRow, Store
from app.engine.tables import OPEN_STATUSES
from app.logs import bind_log_context

log = logging.getLogger("repairbot.engine")

JobSink = Callable[[list[Job]], Awaitable[None]]


class ExecutionCache:
    """Live workflow executions kept between tasks (sticky execution), so a
    run's next task applies only its new events instead of replaying all."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, WorkflowExecution] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def take(self, run_id: str) -> WorkflowExecution | None:
        return self._items.pop(run_id, None)

    def put(self, run_id: str, execution: WorkflowExecution) -> None:
        self._items[run_id] = execution
        while len(self._items) > self.capacity:
            _, evicted = self._items.popitem(last=False)
            evicted.close()

    def clear(self) -> None:
        for execution in self._items.values():
            execution.close()
        self._items.clear()


class Worker:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        worker_id: str,
        code_version: str,
        deps: Dependencies | None = None,
        faults: FaultPoints | None = None,
        max_history_events: int = 2000,
        cache_size: int = 1000,
    ) -> None:
        self.store = store
        self.registry = registry
        self.worker_id = worker_id
        self.code_version = code_version
        self.deps = deps or Dependencies()
        self.faults = faults or FaultPoints()
        self.max_history_events = max_history_events
        self.cache = ExecutionCache(cache_size)
        self._run_locks: dict[str, asyncio.Lock] = {}
        self.sink: JobSink | None = None
        #: Run due follow-up jobs here instead of dispatching them (arq mode):
        #: set to the number that may run at once; 0 disables it.
        self.eager_capacity = 0
        self._eager: set[asyncio.Task[None]] = set()

    async def _emit(self, jobs: list[Job]) -> None:
        """Hand on the jobs a transaction wrote. With eager execution on, a due
        job this worker has code for runs right here: the run's next step does
        not wait for a round trip through Redis and a poll. Safe, because jobs
        are only hints: the claim or the guarded commit decides, and the job's
        outbox row stays until it is consumed, so a crash loses nothing."""
        remote: list[Job] = []
        now = time.time()
        for job in jobs:
            if self._can_run_eagerly(job, now):
                task = asyncio.create_task(self._run_eagerly(job), name=f"eager {job.job_id}")
                self._eager.add(task)
                task.add_done_callback(self._eager.discard)
            else:
                remote.append(job)
        if remote and self.sink is not None:
            await self.sink(remote)

    def _can_run_eagerly(self, job: Job, now: float) -> bool:
        if len(self._eager) >= self.eager_capacity or job.not_before > now:
            return False
        if job.kind == WORKFLOW_TASK:
            return job.queue in self._workflow_queues
        return job.kind == ACTIVITY and job.activity in self.registry.activities

    @property
    def _workflow_queues(self) -> set[str]:
        return {workflow_queue(name, version) for name, version in self.registry.workflows}

    async def drain(self) -> None:
        """Stop eager jobs (their outbox rows remain, so nothing is lost)."""
        tasks = list(self._eager)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_eagerly(self, job: Job) -> None:
        try:
            await self.run_job(job)
        except Exception:
            # The outbox row is still there: the relay will offer the job again.
            log.exception("eager job %s failed", job.job_id)

    async def run_job(self, job: Job) -> None:
        bind_log_context()
        if job.kind == WORKFLOW_TASK:
            await self.run_workflow_task(job.ref)
        elif job.kind == ACTIVITY:
            await self.run_activity(int(job.ref))
        elif job.kind == TIMER:
            run_id, _, cmd = job.ref.rpartition("|")
            await self._emit(self.store.fire_timer(run_id, int(cmd)))
        else:
            log.error("unknown job kind %r (job %s)", job.kind, job.job_id)

    # -- workflow tasks --------------------------------------------------------

    async def run_workflow_task(self, run_id: str) -> None:
        lock = self._run_locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            try:
                for _ in range(5):
                    if await self._workflow_task_once(run_id):
                        return
                # Contended for long: leave it to the next job of this run.
                log.info("workflow task for %s kept conflicting; will be retried", run_id)
            finally:
                if not lock.locked() or len(self._run_locks) > 10_000:
                    self._run_locks.pop(run_id, None)

    async def _workflow_task_once(self, run_id: str) -> bool:
        run = self.store.load_run(run_id)
        if run is None or run.status not in OPEN_STATUSES:
            self.cache.take(run_id)
            self.store.discard_workflow_task_jobs(run_id)
            return True
        if not self.registry.has_workflow(run.workflow_name, run.workflow_version):
            log.warning(
                "worker has no code for %s@%s (run %s); leaving it to a worker that does",
                run.workflow_name,
                run.workflow_version,
                run_id,
            )
            return True
        bind_log_context(run_id=run_id, workflow=f"{run.workflow_name}@{run.workflow_version}")
        resumed = self._resume(run)
        if resumed is None:
            return True  # nothing new since the cached state
        execution, events = resumed
        step = execution.apply(events, task_time=datetime.now(UTC))
        jobs = self.store.commit_workflow_task(run, step)
        if jobs is None:
            execution.close()
            return False
        if step.outcome is None:
            execution.history_length = run.history_length + len(step.commands)
            self.cache.put(run_id, execution)
        else:
            execution.close()
            log.info("run %s ended: %s", run_id, step.outcome.status)
        await self._emit(jobs)
        return True

    def _resume(self, run: RunRow) -> tuple[WorkflowExecution, list[Event]] | None:
        """The execution to continue and the events it has not seen yet: the
        cached one fed only new events when it is exactly behind, else a fresh
        one fed the whole history. None when there is nothing new."""
        cached = self.cache.take(run.run_id)
        if cached is not None:
            if cached.history_length == run.history_length:
                self.cache.put(run.run_id, cached)
                return None
            if cached.history_length < run.history_length:
                events = self.store.load_events(run.run_id, after=cached.history_length)
                # Commands written by another worker mean our cached state is behind.
                if not any(event.is_command for event in events):
                    self.cache.hits += 1
                    return cached, events
            cached.close()
        self.cache.misses += 1
        defn = self.registry.workflow(run.workflow_name, run.workflow_version)
        execution = WorkflowExecution(
            defn,
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            max_history_events=self.max_history_events,
        )
        return execution, self.store.load_events(run.run_id)

    # -- activities ------------------------------------------------------------

    async def run_activity(self, task_id: int) -> None:
        claim = self.store.claim_activity(
            task_id,
            worker_id=self.worker_id,
            code_version=self.code_version,
            can_run=self.registry.activities,
        )
        if claim is None:
            return
        bind_log_context(run_id=claim.run_id, activity=claim.activity, attempt=claim.attempt)
        defn = self.registry.activities[claim.activity]  # claimed only if we have it
        actx = ActivityContext(
            claim, store=self.store, deps=self.deps, worker_id=self.worker_id, faults=self.faults
        )
        remaining = claim.started_at + claim.options.timeouts.start_to_close - time.time()
        try:
            if claim.needs_reconcile and defn.reconcile is not None:
                verdict = await asyncio.wait_for(defn.reconcile(actx, claim.input), remaining)
                if isinstance(verdict, Found):
                    await self._record_result(claim, verdict.result, outcome="reconciled-found")
                    return
                if isinstance(verdict, Unknown):
                    self.store.park_for_human(claim.task_id, claim.token, verdict.reason)
                    return
                assert isinstance(verdict, Absent)
            result = await asyncio.wait_for(defn.fn(actx, claim.input), remaining)
        except StaleLease:
            log.warning(
                "attempt %s of %s lost its lease; stopping", claim.attempt, claim.operation_id
            )
            return
        except ActivityFailure as failure:
            await self._record_failure(
                claim,
                Failure(
                    failure.failure_class,
                    type(failure).__name__,
                    failure.message,
                    failure.next_retry_delay,
                ),
            )
            return
        except TimeoutError:
            failure_class = "ambiguous" if defn.reconcile is not None else "transient"
            await self._record_failure(
                claim, Failure(failure_class, "StartToCloseTimeout", "attempt ran out of time")
            )
            return
        except Exception as exc:  # any other error is transient unless declared otherwise
            log.exception("activity %s attempt %s raised", claim.operation_id, claim.attempt)
            await self._record_failure(claim, Failure("transient", type(exc).__name__, str(exc)))
            return
        problem = json_problem(result)
        if problem:
            unstorable = Failure("permanent", "TypeError", f"activity result {problem}")
            await self._record_failure(claim, unstorable)
            return
        self.faults.hit("activity.before_complete", claim.activity)
        await self._record_result(claim, result)

    async def _record_result(
        self, claim: Claim, result: Any, *, outcome: str = "completed"
    ) -> None:
        try:
            jobs = self.store.complete_activity(claim.task_id, claim.token, result, outcome=outcome)
        except StaleLease:
            log.warning(
                "result of stale attempt %s of %s rejected", claim.attempt, claim.operation_id
            )
            return
        await self._emit(jobs)

    async def _record_failure(self, claim: Claim, failure: Failure) -> None:
        try:
            jobs = self.store.fail_activity(claim.task_id, claim.token, failure)
        except StaleLease:
            log.warning(
                "failure of stale attempt %s of %s rejected", claim.attempt, claim.operation_id
            )
            return
        await self._emit(jobs)
