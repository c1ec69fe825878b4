"""Executes jobs: workflow tasks, activity attempts and timer firings.

The same code runs under every dispatcher (in-process or arq): a job only
names what to look at; the database says whether there is anything to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError

from app.engine._activity_context import ActivityContext
from app.engine._clock import Clock, clock_datetime, system_clock
from app.engine._db_retry import is_transient, retrying
from app.engine._errors import ActivityFailure, StaleLease
from app.engine._faults import FaultPoints
from app.engine._history_commands import (
    ACTIVITY_CANCEL_REQUESTED,
    ACTIVITY_COMPLETED,
    ACTIVITY_SCHEDULED,
    RecordedEvent,
)
from app.engine._jobs import ACTIVITY, TIMER, WORKFLOW_TASK, Job, workflow_queue
from app.engine._registry import Absent, Found, Registry, Unknown
from app.engine._replay import WorkflowExecution, WorkflowTaskResult, json_problem
from app.engine._store import Claim, Continued, EagerOffer, Failure, RunRow, Store
from app.engine._store.async_store import StoreThreads
from app.engine._tables import OPEN_STATUSES
from app.logs import bind_log_context

log = logging.getLogger("repairbot.engine")

JobSink = Callable[[list[Job]], Awaitable[None]]
T = TypeVar("T")


@dataclass
class JobCounts:
    """Where this worker's jobs came from and went: read by benchmarks and
    operators to tell a run that stays on its process (eager, fused) from
    one that travels (sent, taken from the channel, completed unfused)."""

    #: Jobs taken from the channel (``submit``).
    taken: int = 0
    #: Follow-up jobs run here without the channel.
    eager: int = 0
    #: Follow-up jobs handed to the channel.
    sent: int = 0
    #: Results recorded together with the run's next workflow task.
    fused: int = 0
    #: Results recorded alone (no cached execution here, or history moved).
    unfused: int = 0


class ExecutionCache:
    """Live workflow executions kept between tasks (sticky execution), so a
    run's next task applies only its new events instead of replaying all.
    Each is kept with the run row as of its last commit (history length
    included), which a fused step commits against."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[WorkflowExecution, RunRow]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def take(self, run_id: str) -> WorkflowExecution | None:
        item = self._items.pop(run_id, None)
        return item[0] if item is not None else None

    def take_with_run(self, run_id: str) -> tuple[WorkflowExecution, RunRow] | None:
        return self._items.pop(run_id, None)

    def put(self, run: RunRow, execution: WorkflowExecution) -> None:
        """Keep ``execution``; ``run`` carries its history length."""
        self._items[run.run_id] = (execution, run)
        while len(self._items) > self.capacity:
            _, (evicted, _run) = self._items.popitem(last=False)
            evicted.close()

    def clear(self) -> None:
        for execution, _run in self._items.values():
            execution.close()
        self._items.clear()


class Worker:
    """Runs jobs on a bounded pool of asyncio tasks of its own.

    Jobs reach the pool from the channel (:meth:`submit`, which waits for a
    free slot) or straight from this worker's own commits (eager follow-ups).
    The pool, not the channel, holds the work: an arq job only hands its job
    over and ends, so arq never holds a lock for the length of an activity,
    and a drain (:meth:`drain`) decides what finishes and what is handed back.
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        worker_id: str,
        code_version: str,
        faults: FaultPoints | None = None,
        max_history_events: int = 2000,
        cache_size: int = 1000,
        concurrency: int = 8,
        db_patience: float = 15.0,
        threads: StoreThreads | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.store = store
        #: The runtime's clock (see app/engine/_clock.py): stored times are compared with it.
        self.clock = clock
        #: Every store call goes through these threads, never on the event loop.
        self.threads = threads or StoreThreads.for_engine(store.engine)
        self.registry = registry
        self.worker_id = worker_id
        self.code_version = code_version
        self.faults = faults or FaultPoints()
        self.max_history_events = max_history_events
        self.cache = ExecutionCache(cache_size)
        self.counts = JobCounts()
        self._run_locks: dict[str, asyncio.Lock] = {}
        self.sink: JobSink | None = None
        #: Run due follow-up jobs here instead of dispatching them (arq mode):
        #: set to the number that may run at once; 0 disables it.
        self.eager_capacity = 0
        #: Let a fused step claim the next activity for this worker at once
        #: (in-process, or arq with eager follow-ups); off when every job is
        #: meant to go through the channel.
        self.claims_eagerly = True
        #: How long a database outage is ridden out before giving up a write.
        self.db_patience = db_patience
        self._slots = asyncio.Semaphore(concurrency)
        self._pool: set[asyncio.Task[None]] = set()
        #: False once draining: no new work is taken.
        self.accepting = True
        #: Attempts this worker runs now: task id -> fencing token.
        self._held: dict[int, int] = {}
        #: Attempts whose outcome could not be written: released (as failed,
        #: with an unknown effect) as soon as the database answers again.
        self.unrecorded: dict[int, tuple[int, Failure]] = {}

    # -- the pool ----------------------------------------------------------------

    async def submit(self, job: Job) -> bool:
        """Run ``job`` on the pool; returns once it started (after waiting for a
        free slot), or False if this worker is draining and left it."""
        if not self.accepting:
            return False
        await self._slots.acquire()
        if not self.accepting:
            self._slots.release()
            return False
        self._spawn(job)
        self.counts.taken += 1
        return True

    def _spawn(self, job: Job) -> None:
        task = asyncio.create_task(self._run_pooled(job), name=f"job {job.job_id}")
        self._pool.add(task)
        task.add_done_callback(self._pool_done)

    def _pool_done(self, task: asyncio.Task[None]) -> None:
        self._pool.discard(task)
        self._slots.release()

    async def _run_pooled(self, job: Job) -> None:
        try:
            await self.run_job(job)
        except Exception:
            # The outbox row is still there: the relay will offer the job again.
            log.exception("job %s failed", job.job_id)

    @property
    def busy(self) -> int:
        return len(self._pool)

    async def emit(self, jobs: list[Job]) -> None:
        """Hand on the jobs a transaction wrote (this worker's, or a reconciler
        pass's in this process). With eager execution on, a due
        job this worker has code for runs right here: the run's next step does
        not wait for a round trip through Redis and a poll. Safe, because jobs
        are only hints: the claim or the guarded commit decides, and the job's
        outbox row stays until it is consumed, so a crash loses nothing."""
        remote: list[Job] = []
        now = self.clock()
        for job in jobs:
            if self._can_run_eagerly(job, now):
                await self._slots.acquire()  # free now: checked just above
                self._spawn(job)
                self.counts.eager += 1
            else:
                remote.append(job)
        if remote and self.sink is not None:
            self.counts.sent += len(remote)
            await self.sink(remote)

    def _can_run_eagerly(self, job: Job, now: float) -> bool:
        if not self.accepting or self._slots.locked() or job.not_before > now:
            return False
        if self.busy >= self.eager_capacity:
            return False
        if job.kind == WORKFLOW_TASK:
            return job.queue in self._workflow_queues
        return job.kind == ACTIVITY and job.activity in self.registry.activities

    @property
    def _workflow_queues(self) -> set[str]:
        return {workflow_queue(name, version) for name, version in self.registry.workflows}

    async def drain(self, grace: float = 0.0) -> None:
        """Take no new work; give running jobs ``grace`` seconds to finish, then
        cancel them: a cancelled attempt hands its lease back at once, and
        the outbox rows of anything unfinished remain, so nothing is lost."""
        self.accepting = False
        if self._pool and grace > 0:
            await asyncio.wait(list(self._pool), timeout=grace)
        tasks = list(self._pool)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _db(self, call: Callable[[], T], what: str) -> T:
        return await retrying(call, what=what, patience=self.db_patience, threads=self.threads)

    async def run_job(self, job: Job) -> None:
        bind_log_context()
        if job.kind == WORKFLOW_TASK:
            claim = await self.run_workflow_task(job.ref)
            # The task's commit may have claimed the activity it scheduled for
            # this worker: run it in this job's slot, as a fused step would.
            while claim is not None:
                claim = await self._run_claimed(claim)
        elif job.kind == ACTIVITY:
            await self.run_activity(int(job.ref))
        elif job.kind == TIMER:
            run_id, _, cmd = job.ref.rpartition("|")
            fired = await self._db(
                lambda: self.store.fire_timer(run_id, int(cmd)), f"firing timer {job.ref}"
            )
            await self.emit(fired)
        else:
            log.error("unknown job kind %r (job %s)", job.kind, job.job_id)

    # -- workflow tasks --------------------------------------------------------

    async def run_workflow_task(self, run_id: str) -> Claim | None:
        """Run the run's workflow task; the attempt its commit claimed for this
        worker (see :meth:`_offer`), which the caller is to run."""
        lock = self._run_locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            try:
                for _ in range(5):
                    done = await self._workflow_task_retrying(run_id)
                    if done is not False:
                        return done if isinstance(done, Claim) else None
                # Contended for long: leave it to the next job of this run.
                log.info("workflow task for %s kept conflicting; will be retried", run_id)
                return None
            finally:
                if not lock.locked() or len(self._run_locks) > 10_000:
                    self._run_locks.pop(run_id, None)

    async def _workflow_task_retrying(self, run_id: str) -> bool | Claim:
        """One workflow task, started over while the database is unavailable:
        the commit is guarded by history length, so a retry after a commit
        whose outcome was lost is harmless (it finds the history moved on)."""
        deadline = time.monotonic() + self.db_patience
        delay = 0.05
        while True:
            try:
                return await self._workflow_task_once(run_id)
            except DBAPIError as exc:
                self.cache.take(run_id)  # what we hold may not match what committed
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("database unavailable in workflow task of %s; retrying", run_id)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _workflow_task_once(self, run_id: str) -> bool | Claim:
        """True: done (or nothing to do); False: history moved, try again; a
        claim: done, and the commit claimed that attempt for this worker."""
        # The cached execution says which events are new: the run and those
        # events come back in one read transaction.
        cached = self.cache.take(run_id)
        after = cached.history_length if cached is not None else 0
        run, events = await self.threads.run(self.store.load_task, run_id, after=after)
        if run is None or run.status not in OPEN_STATUSES:
            if cached is not None:
                cached.close()
            await self.threads.run(self.store.discard_workflow_task_jobs, run_id)
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
        resumed = await self._resume(run, cached, events)
        if resumed is None:
            return True  # nothing new since the cached state
        execution, events = resumed
        step = execution.apply(events, task_time=clock_datetime(self.clock))
        offer = self._offer(step)
        try:
            jobs = await self.threads.run(self.store.commit_workflow_task, run, step, offer=offer)
        except DBAPIError:
            execution.close()
            # The commit may have gone through, claiming an attempt for us
            # that nobody would run: release it, then retry the task.
            await self._release_orphan(_eager_operation(step, offer))
            raise
        if jobs is None:
            execution.close()
            return False
        self._keep(run, run.history_length, execution, step)
        self.faults.hit("workflow_task.after_commit")
        await self.emit(jobs)
        taken = offer.taken if offer is not None else None
        return taken if taken is not None else True

    def _keep(
        self, run: RunRow, before: int, execution: WorkflowExecution, step: WorkflowTaskResult
    ) -> None:
        """After ``step`` committed its commands after history position
        ``before``: cache the execution for the run's next task, or close it
        when the run ended."""
        if step.outcome is None:
            execution.history_length = before + len(step.commands)
            self.cache.put(replace(run, history_length=execution.history_length), execution)
        else:
            execution.close()
            log.info("run %s ended: %s", run.run_id, step.outcome.status)

    async def _resume(
        self, run: RunRow, cached: WorkflowExecution | None, new_events: list[RecordedEvent]
    ) -> tuple[WorkflowExecution, list[RecordedEvent]] | None:
        """The execution to continue and the events it has not seen yet: the
        cached one fed only ``new_events`` (read after its history length) when
        it is exactly behind, else a fresh one fed the whole history. None when
        there is nothing new."""
        if cached is not None:
            if cached.history_length == run.history_length:
                self.cache.put(run, cached)
                return None
            # Commands written by another worker mean our cached state is behind.
            if cached.history_length < run.history_length and not any(
                event.is_command for event in new_events
            ):
                self.cache.hits += 1
                return cached, new_events
            cached.close()
        self.cache.misses += 1
        defn = self.registry.workflow(run.workflow_name, run.workflow_version)
        execution = WorkflowExecution(
            defn,
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            max_history_events=self.max_history_events,
        )
        if cached is None:
            return execution, new_events  # read from the start
        events = await self.threads.run(self.store.load_events, run.run_id)
        return execution, [event for event in events if event.seq <= run.history_length]

    # -- activities ------------------------------------------------------------

    async def run_activity(self, task_id: int) -> None:
        self.faults.hit("activity.before_claim")
        claim = await self._claim(task_id)
        while claim is not None:
            # A completion committed with the run's next step may have claimed
            # that step's activity for us: run it in this same slot.
            claim = await self._run_claimed(claim)

    async def _run_claimed(self, claim: Claim) -> Claim | None:
        bind_log_context(run_id=claim.run_id, activity=claim.activity, attempt=claim.attempt)
        self.faults.hit("activity.after_claim", claim.activity)
        self._held[claim.task_id] = claim.token
        try:
            return await self._attempt(claim)
        except asyncio.CancelledError:
            # Draining (or shutting down): hand the attempt back now rather than
            # leave it to our silence or its lease.
            await self._hand_back(claim, "WorkerStopped", "the worker stopped during the attempt")
            raise
        finally:
            self._held.pop(claim.task_id, None)

    async def _claim(self, task_id: int) -> Claim | None:
        unsure = False

        def claim() -> Claim | None:
            nonlocal unsure
            try:
                return self.store.claim_activity(
                    task_id,
                    worker_id=self.worker_id,
                    code_version=self.code_version,
                    can_run=self.registry.activities,
                )
            except DBAPIError:
                unsure = True  # the claim may have committed before the error
                raise

        got = await self._db(claim, f"claiming activity task {task_id}")
        if got is None and unsure:
            # A claim whose commit was lost is an attempt held in our name that
            # nobody runs: release it so the retry need not wait for its lease.
            token = await self.threads.run(self.store.held_token, task_id, self.worker_id)
            if token is not None and task_id not in self._held:
                lost = Failure("transient", "ClaimUnconfirmed", "claim outcome was lost", 0.0)
                with contextlib.suppress(StaleLease):
                    released = await self.threads.run(
                        self.store.fail_activity, task_id, token, lost
                    )
                    await self.emit(released)
        return got

    async def _hand_back(self, claim: Claim, error_type: str, message: str) -> None:
        defn = self.registry.activities.get(claim.activity)
        failure_class = "ambiguous" if defn is not None and defn.reconcile else "transient"
        failure = Failure(failure_class, error_type, message, 0.0)
        try:
            await self.threads.run(self.store.fail_activity, claim.task_id, claim.token, failure)
        except StaleLease:
            pass
        except DBAPIError:
            self.unrecorded[claim.task_id] = (claim.token, failure)

    async def _attempt(self, claim: Claim) -> Claim | None:
        """Run the attempt and record its outcome; the next attempt, when the
        recorded completion claimed one for this worker."""
        defn = self.registry.activities[claim.activity]  # claimed only if we have it
        actx = ActivityContext(
            claim,
            store=self.store,
            threads=self.threads,
            worker_id=self.worker_id,
            faults=self.faults,
        )
        actx.db_patience = self.db_patience
        remaining = claim.started_at + claim.options.timeouts.start_to_close - self.clock()
        try:
            if claim.needs_reconcile and defn.reconcile is not None:
                verdict = await asyncio.wait_for(defn.reconcile(actx, claim.input), remaining)
                if isinstance(verdict, Found):
                    await self._record_result(claim, verdict.result, outcome="reconciled-found")
                    return None
                if isinstance(verdict, Unknown):
                    reason = verdict.reason
                    await self._db(
                        lambda: self.store.park_for_human(claim.task_id, claim.token, reason),
                        "parking a run",
                    )
                    return None
                assert isinstance(verdict, Absent)
            result = await asyncio.wait_for(defn.fn(actx, claim.input), remaining)
        except StaleLease:
            log.warning(
                "attempt %s of %s lost its lease; stopping", claim.attempt, claim.operation_id
            )
            return None
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
            return None
        except TimeoutError:
            failure_class = "ambiguous" if defn.reconcile is not None else "transient"
            await self._record_failure(
                claim, Failure(failure_class, "StartToCloseTimeout", "attempt ran out of time")
            )
            return None
        except Exception as exc:  # any other error is transient unless declared otherwise
            log.exception("activity %s attempt %s raised", claim.operation_id, claim.attempt)
            await self._record_failure(claim, Failure("transient", type(exc).__name__, str(exc)))
            return None
        problem = json_problem(result)
        if problem:
            unstorable = Failure("permanent", "TypeError", f"activity result {problem}")
            await self._record_failure(claim, unstorable)
            return None
        self.faults.hit("activity.before_complete", claim.activity)
        return await self._record_result(claim, result)

    async def _record_result(
        self, claim: Claim, result: Any, *, outcome: str = "completed"
    ) -> Claim | None:
        if outcome == "completed":
            try:
                fused = await self._complete_fused(claim, result)
            except StaleLease:
                log.warning(
                    "result of stale attempt %s of %s rejected", claim.attempt, claim.operation_id
                )
                return None
            if fused is not None:
                self.counts.fused += 1
                return fused.claimed
            self.counts.unfused += 1

        def complete() -> list[Job]:
            return self.store.complete_activity(claim.task_id, claim.token, result, outcome=outcome)

        await self._record(claim, complete, "result")
        return None

    async def _complete_fused(self, claim: Claim, result: Any) -> Continued | None:
        """Record the result together with the run's next workflow task, when
        this worker holds the run's execution (see app/engine/_store/fused.py).
        None: not done (no cached execution, or history moved); the caller
        records the result the usual way."""
        lock = self._run_locks.setdefault(claim.run_id, asyncio.Lock())
        async with lock:
            cached = self.cache.take_with_run(claim.run_id)
            if cached is None:
                return None
            execution, run = cached
            completed = RecordedEvent(
                seq=run.history_length + 1,
                type=ACTIVITY_COMPLETED,
                data={
                    "cmd": claim.cmd,
                    "activity": claim.activity,
                    "result": result,
                    "attempts": claim.attempt,
                    "worker_id": self.worker_id,
                    "code_version": self.code_version,
                },
            )
            bind_log_context(run_id=run.run_id)
            step = execution.apply([completed], task_time=clock_datetime(self.clock))
            offer = self._offer(step)
            self.faults.hit("fused.before_commit")
            try:
                done = await self.threads.run(
                    self.store.complete_and_continue,
                    claim,
                    result,
                    run,
                    completed,
                    step,
                    offer=offer,
                )
            except DBAPIError:
                execution.close()
                return await self._fused_unsure(claim, _eager_operation(step, offer))
            except BaseException:
                execution.close()
                raise
            if done is None:
                execution.close()
                return None
            self._keep(run, completed.seq, execution, step)
        self.faults.hit("fused.after_commit")
        self.faults.hit("workflow_task.after_commit")
        await self.emit(done.jobs)
        return done

    def _offer(self, step: WorkflowTaskResult) -> EagerOffer | None:
        """This worker's offer to run the next activity ``step`` schedules in
        the slot the finished job (an activity, or a workflow task) leaves, so
        capacity is there by construction. None when ``step`` cancels work: an
        activity scheduled and cancelled in one task must never start, and
        only a task still ``scheduled`` is cancelled before it starts."""
        if not self.accepting or not self.claims_eagerly:
            return None
        if step.cancel_delivered or any(
            command.type == ACTIVITY_CANCEL_REQUESTED for command in step.commands
        ):
            return None
        return EagerOffer(self.worker_id, self.code_version, self.registry.activities)

    async def _fused_unsure(self, claim: Claim, eager_operation: str | None) -> Continued | None:
        """A fused commit failed with a connection error: it may have committed.
        If it did not, complete the usual way (None). If it did, release the
        attempt it claimed for us, which nobody runs now; its other jobs are
        in the outbox for the relay."""
        try:
            committed, orphan = await self._db(
                lambda: self.store.fused_outcome(claim, self.worker_id, eager_operation),
                f"checking the fused completion of {claim.operation_id}",
            )
        except DBAPIError:
            return None  # the usual path copes with a database that stays away
        if not committed:
            return None
        if orphan is not None:
            await self._release_eager(orphan)
        return Continued([], None)

    async def _release_orphan(self, eager_operation: str | None) -> None:
        """After a commit whose outcome was lost: release the attempt it claimed
        for this worker by ``eager_operation``, if it committed."""
        if eager_operation is None:
            return
        try:
            orphan = await self._db(
                lambda: self.store.orphaned_eager_claim(eager_operation, self.worker_id),
                f"checking the eager claim of {eager_operation}",
            )
        except DBAPIError:
            # Still unreachable: the lease (or our silence) releases it.
            log.warning("could not check the eager claim of %s", eager_operation)
            return
        if orphan is not None:
            await self._release_eager(orphan)

    async def _release_eager(self, task_id: int) -> None:
        lost = Failure("transient", "ClaimUnconfirmed", "eager claim outcome was lost", 0.0)
        with contextlib.suppress(StaleLease):
            released = await self.threads.run(self.store.fail_activity, task_id, 1, lost)
            await self.emit(released)

    async def _record_failure(self, claim: Claim, failure: Failure) -> None:
        # An operator reading the log sees every failed attempt, not only the
        # last one that ends a run (the run's error keeps only the last).
        log.log(
            logging.INFO if failure.failure_class == "cancelled" else logging.WARNING,
            "activity %s attempt %s failed (%s): %s",
            claim.operation_id,
            claim.attempt,
            failure.failure_class,
            failure.message,
        )

        def fail() -> list[Job]:
            return self.store.fail_activity(claim.task_id, claim.token, failure)

        await self._record(claim, fail, "failure")

    async def _record(self, claim: Claim, write: Callable[[], list[Job]], what: str) -> None:
        try:
            jobs = await self._db(write, f"recording the {what} of {claim.operation_id}")
        except StaleLease:
            log.warning(
                "%s of stale attempt %s of %s rejected", what, claim.attempt, claim.operation_id
            )
            return
        except DBAPIError:
            # The outcome cannot be written now. The attempt must not stay
            # ``running`` until its own timeout: release it (its effect is
            # unknown, so reconcile decides) as soon as the database answers.
            log.exception(
                "could not record the %s of %s attempt %s; releasing it when the database returns",
                what,
                claim.operation_id,
                claim.attempt,
            )
            defn = self.registry.activities.get(claim.activity)
            failure_class = "ambiguous" if defn is not None and defn.reconcile else "transient"
            message = f"the attempt's {what} could not be recorded"
            self.unrecorded[claim.task_id] = (
                claim.token,
                Failure(failure_class, "ResultNotRecorded", message, 0.0),
            )
            return
        await self.emit(jobs)

    async def release_unrecorded(self) -> None:
        """Release the attempts whose outcome could not be written (called
        after each successful liveness beat: the database answers again)."""
        for task_id, (token, failure) in list(self.unrecorded.items()):
            try:
                jobs = await self.threads.run(self.store.fail_activity, task_id, token, failure)
            except StaleLease:
                jobs = []  # already released by the reconciler
            self.unrecorded.pop(task_id, None)
            log.info("released unrecorded attempt of activity task %s", task_id)
            await self.emit(jobs)


def _eager_operation(step: WorkflowTaskResult, offer: EagerOffer | None) -> str | None:
    """The operation id of the activity ``offer`` would claim in ``step``'s
    commit: the first scheduled that the worker has code for. (Not
    ``offer.wants``: the commit, once it claimed, has set ``offer.taken``.)"""
    if offer is None:
        return None
    for command in step.commands:
        if command.type == ACTIVITY_SCHEDULED and command.attrs["activity"] in offer.activities:
            return str(command.attrs["operation_id"])
    return None
