"""arq over Redis as the dispatch channel (the production path).

Redis is a doorbell, never a record: the database says what is due, and a
job only says "look at this now".

- An arq job hands its job to the worker's own pool (:meth:`Worker.submit`)
  and ends; it does not run the work. The consumer's poll takes the due
  engine jobs out of Redis in one script
  (:data:`~app.engine._arq_scripts.TAKE`) and hands them over without arq's
  per-job bookkeeping, so shutting down, draining and riding out a Redis
  restart are the worker's business.
- Job ids are deterministic, so a double relay is one job; a *re*-dispatch
  by the relay gets a fresh id (see :mod:`app.engine._jobs`), so keys that a
  crashed worker left behind in Redis can never hold work back.
- Jobs are JSON (:mod:`app.engine._redis_channel`); arq's own retries are off
  (``max_tries=1``: the database owns attempts) and results are not kept.
- Workflow tasks go to one queue per workflow version; activities and timers
  to the default queue.
- Consumers do not wait out arq's poll: the dispatcher rings a doorbell
  (:mod:`app.engine._doorbell`) for jobs due now, and a consumer polls as soon
  as its queue rings. The poll delay (:data:`POLL_DELAY`) is the fallback
  for lost rings and the bound on how late a deferred job (a timer) starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from arq.cron import cron
from arq.jobs import serialize_job
from arq.worker import Worker as ArqWorker
from arq.worker import func
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from app.engine._arq_scripts import ENQUEUE_SCRIPT, START_SCRIPT, TAKE_SCRIPT, execute
from app.engine._doorbell import Doorbell, add_rings
from app.engine._jobs import DEFAULT_QUEUE, ENGINE_JOB_PREFIXES, RETRACT, Job, workflow_queue
from app.engine._redis_channel import RefusedJob, dump_result, load_job, use_json
from app.engine._runtime import Runtime

log = logging.getLogger("repairbot.dispatch")

JOB_FUNCTION = "run_job"
#: How long an arq job may wait for a free slot in the worker's pool; past
#: it arq cancels the job and the relay offers the work again.
HAND_OFF_TIMEOUT = 300
#: An undelivered job's Redis key lives this long past its due time; the relay
#: re-dispatches anything still due long before (the database keeps the work).
JOB_EXPIRY = timedelta(hours=1)
#: Seconds between polls of an arq queue when no ring comes: the latency of
#: a job whose ring was lost, and at most this late for a deferred job.
POLL_DELAY = 0.5


class ArqDispatcher:
    def __init__(self, pool: ArqRedis) -> None:
        self.pool = use_json(pool)

    async def enqueue(self, jobs: Sequence[Job]) -> None:
        """Send jobs (and retractions). A Redis failure is logged, not raised:
        the outbox rows are committed, and the relay sends them again."""
        try:
            await self._enqueue(jobs)
        except (RedisError, OSError) as exc:
            log.warning(
                "could not reach Redis (%s); the relay will dispatch %d job(s)", exc, len(jobs)
            )

    async def _enqueue(self, jobs: Sequence[Job]) -> None:
        """All of ``jobs`` and the rings for those due now, in one round trip
        (arq's ``enqueue_job`` takes three per job, the rings one more)."""
        for job in jobs:
            if job.kind == RETRACT:
                await self._retract(job)
        sends = [job for job in jobs if job.kind != RETRACT]
        if not sends:
            return
        now_ms = int(time.time() * 1000)

        def build(pipe: Pipeline) -> None:
            for job in sends:
                ENQUEUE_SCRIPT.queue(pipe, *self._enqueue_call(job, now_ms))
            add_rings(pipe, self._to_ring(sends, now_ms))

        await execute(self.pool, build, [ENQUEUE_SCRIPT])

    def _to_ring(self, jobs: Sequence[Job], now_ms: int) -> set[str]:
        """The queues to ring for ``jobs``: those with a job due now (pub/sub
        cannot ring at a later time; deferred jobs wait for the poll)."""
        return {job.queue for job in jobs if job.not_before * 1000 <= now_ms}

    def _enqueue_call(self, job: Job, now_ms: int) -> tuple[list[str], list[Any]]:
        """What arq's ``enqueue_job`` would write for ``job``: the keys and arguments
        of :data:`~app.engine._arq_scripts.ENQUEUE`."""
        score = max(now_ms, int(job.not_before * 1000))
        expires_ms = score - now_ms + int(JOB_EXPIRY.total_seconds() * 1000)
        payload = serialize_job(
            JOB_FUNCTION,
            (job.kind, job.ref, job.job_id),
            {},
            None,
            now_ms,
            serializer=self.pool.job_serializer,
        )
        keys = [job_key_prefix + job.job_id, result_key_prefix + job.job_id, job.queue]
        return keys, [expires_ms, payload, score, job.job_id]

    async def waiting(self, jobs: Sequence[Job]) -> set[str]:
        """The ids among ``jobs`` that wait in their arq queue: in the queue's
        sorted set, with their job key (arq drops an entry whose key expired)
        and without an in-progress key. arq keeps a job in the sorted set until
        it finishes, so a job that a dead worker left locked is in the set too,
        but with its in-progress key: that one is not waiting (it would stall
        until the key expires), and neither is one missing from Redis. One
        MULTI, so each job's three answers describe the same moment."""
        async with self.pool.pipeline(transaction=True) as pipe:
            for job in jobs:
                pipe.zscore(job.queue, job.job_id)
                pipe.exists(job_key_prefix + job.job_id)
                pipe.exists(in_progress_key_prefix + job.job_id)
            replies = await pipe.execute()
        answers = zip(jobs, replies[0::3], replies[1::3], replies[2::3], strict=True)
        return {
            job.job_id
            for job, score, queued, taken in answers
            if score is not None and queued and not taken
        }

    async def _retract(self, job: Job) -> None:
        async with self.pool.pipeline(transaction=True) as pipe:
            pipe.zrem(job.queue, job.job_id)
            pipe.delete(job_key_prefix + job.job_id)
            await pipe.execute()


async def run_job(ctx: dict[str, Any], kind: str, ref: str, job_id: str) -> None:
    """The arq job: hand the job to this worker's pool and end."""
    runtime: Runtime = ctx["runtime"]
    taken = await runtime.worker.submit(Job(job_id, kind, ref, queue=""))
    if not taken:
        log.info("draining: left job %s to the relay", job_id)


def job_arguments(raw: bytes) -> tuple[str, str, str]:
    """The ``run_job`` arguments of an engine job's bytes; anything else is
    refused (:class:`RefusedJob`, logged): whoever can write to Redis can
    write a job, and a job of ours calls nothing but :func:`run_job`."""
    data = load_job(raw)
    args = data["a"]
    if (
        data["f"] != JOB_FUNCTION
        or data["k"]
        or len(args) != 3
        or not all(isinstance(arg, str) for arg in args)
    ):
        log.error("refused a job that is not a %s call: %.200r", JOB_FUNCTION, data)
        raise RefusedJob("job is not an engine job")
    return args[0], args[1], args[2]


async def reconcile(ctx: dict[str, Any]) -> None:
    runtime: Runtime = ctx["runtime"]
    await runtime.reconciler.run_once()


class Consumer(ArqWorker):
    """arq's worker, polling when its queue's doorbell rings or, failing a
    ring, every ``poll_delay`` seconds.

    ``main`` is arq 0.28's own (less its start-up log of the Redis server's
    info), with its fixed-period poll replaced by a wait on the doorbell;
    without a doorbell it sleeps the poll delay out. Overriding ``main`` keeps
    arq's module globals (its ``poll``) untouched."""

    def __init__(self, *args: Any, doorbell: Doorbell | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.doorbell = doorbell
        #: The last poll took as many jobs as it had free slots (or had
        #: none), so more may be due in Redis. Each poll takes no more than
        #: the free slots, leaving the rest to other consumers.
        self._left_behind = False

    async def main(self) -> None:
        if self._pool is None:
            self._pool = await create_pool(
                self.redis_settings,
                job_deserializer=self.job_deserializer,
                job_serializer=self.job_serializer,
                default_queue_name=self.queue_name,
                expires_extra_ms=self.expires_extra_ms,
            )
        self.ctx["redis"] = self.pool
        if self.on_startup:
            await self.on_startup(self.ctx)
        while True:
            await self._poll_iteration()
            if self.burst and await self._burst_done():
                return
            if self._left_behind and self.job_counter < self.max_jobs:
                # A slot came free while the take was under way, before
                # there was anything left behind to wake the consumer for.
                continue
            if self.doorbell is None:
                await asyncio.sleep(self.poll_delay_s)
            else:
                await self.doorbell.wait(self.queue_name, self.poll_delay_s)

    async def _poll_iteration(self) -> None:
        """arq's poll, its ZRANGEBYSCORE and the take of the engine's jobs in
        one script (:data:`~app.engine._arq_scripts.TAKE`: one round trip a
        poll where a read and a script per job took two a job), capped by the
        free slots so that the rest stay in Redis for other consumers. The
        rest of arq's iteration follows unchanged."""
        free = self.max_jobs - self.job_counter
        if self.burst and self.max_burst_jobs >= 0:
            free = min(free, self.max_burst_jobs - self._jobs_started())
        if self.allow_pick_jobs:
            self._left_behind = free <= 0 or await self._take(free) >= free
        if self.allow_abort_jobs:
            await self._cancel_aborted_jobs()
        for job_id, task in list(self.tasks.items()):
            if task.done():
                del self.tasks[job_id]
                task.result()  # as arq does: a failure in a job's task is raised here
        await self.heart_beat()

    async def _take(self, free: int) -> int:
        """Take up to ``free`` due jobs; returns how many were taken."""
        taken, others = await TAKE_SCRIPT(
            self.pool,
            [self.queue_name],
            [
                int(time.time() * 1000),
                self.queue_read_limit,
                free,
                job_key_prefix,
                retry_key_prefix,
                in_progress_key_prefix,
                *ENGINE_JOB_PREFIXES,
            ],
        )
        for job_id_b, raw in zip(taken[0::2], taken[1::2], strict=True):
            # The script took no more than the free slots, so this never waits.
            await self.sem.acquire()
            self.job_counter += 1
            job_id = job_id_b.decode()
            self._track(job_id, self.loop.create_task(self._hand_over(job_id, raw)))
        if others:
            await self.start_jobs(others)
        return len(taken) // 2 + len(others)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's ``start_jobs`` for the ids that are not the engine's (the take
        found them due), one script per job (:meth:`_start`)."""
        for job_id_b in job_ids:
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return
            self.job_counter += 1
            job_id = job_id_b.decode()
            started = await self._start(job_id)
            if started is None:
                # Started elsewhere, finished, or deferred again meanwhile.
                self.job_counter -= 1
                self.sem.release()
                continue
            self._track(job_id, started)

    def _track(self, job_id: str, task: asyncio.Task[None]) -> None:
        task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
        self.tasks[job_id] = task

    async def _hand_over(self, job_id: str, raw: bytes) -> None:
        try:
            kind, ref, sent_as = job_arguments(raw)
        except RefusedJob:
            return  # logged; it left Redis with the take and ran nothing
        runtime: Runtime = self.ctx["runtime"]
        # Killed here, the worker leaves nothing in Redis: the job's outbox
        # row outlives the relay grace and the relay sends it again.
        runtime.faults.hit("arq.after_take")
        try:
            await asyncio.wait_for(run_job(self.ctx, kind, ref, sent_as), HAND_OFF_TIMEOUT)
        except TimeoutError:
            log.warning(
                "job %s found no free slot in %d s; left to the relay", job_id, HAND_OFF_TIMEOUT
            )
        except Exception:
            # As arq's run_job would: the consumer goes on, the relay resends.
            log.exception("handing over job %s failed; left to the relay", job_id)

    async def _start(self, job_id: str) -> asyncio.Task[None] | None:
        """Start a job of arq's own (:data:`~app.engine._arq_scripts.START`: one
        round trip for arq's WATCH/EXISTS/ZSCORE/MULTI) for arq's ``run_job``."""
        score = await START_SCRIPT(
            self.pool,
            [in_progress_key_prefix + job_id, self.queue_name],
            [job_id, int(time.time() * 1000), int(self.in_progress_timeout_s * 1000)],
        )
        if score is None:
            return None
        return self.loop.create_task(self.run_job(job_id, int(float(score))))

    async def _burst_done(self) -> bool:
        if 0 <= self.max_burst_jobs <= self._jobs_started() or not await self.pool.zcard(
            self.queue_name
        ):
            await asyncio.gather(*self.tasks.values())
            return True
        return False

    def _release_sem_dec_counter_on_complete(self) -> None:
        # The jobs the last poll left behind (it had no slot for them) were
        # rung for already, and that ring is used up: a slot that frees
        # polls again rather than wait out the poll delay.
        super()._release_sem_dec_counter_on_complete()
        if self._left_behind and self.doorbell is not None:
            self.doorbell.wake(self.queue_name)


def arq_queues(runtime: Runtime) -> list[str]:
    """The queues this process consumes: the default one first."""
    return [DEFAULT_QUEUE] + [workflow_queue(n, v) for n, v in sorted(runtime.registry.workflows)]


def arq_workers(
    runtime: Runtime,
    redis_settings: RedisSettings,
    *,
    max_jobs: int = 8,
    poll_delay: float = POLL_DELAY,
    doorbell: Doorbell | None = None,
    burst: bool = False,
    handle_signals: bool = False,
    reconcile_cron: bool = True,
) -> list[Consumer]:
    """One arq worker for the default queue (activities, timers and, with
    ``reconcile_cron``, the reconciler as an arq cron job) and one per
    workflow version this process has code for. Without a ``doorbell``
    (covering :func:`arq_queues`) they only poll, so keep ``poll_delay`` short."""
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
        "job_timeout": HAND_OFF_TIMEOUT,
        "job_serializer": dump_result,
        "job_deserializer": load_job,
        "doorbell": doorbell,
    }
    crons = [
        cron(
            reconcile,
            name="reconcile",
            second=set(range(60)),
            run_at_startup=True,
            max_tries=1,
            keep_result=0,
            timeout=HAND_OFF_TIMEOUT,
        )
    ]
    default, *workflow_queues = arq_queues(runtime)
    workers = [Consumer(queue_name=default, cron_jobs=crons if reconcile_cron else [], **common)]
    workers += [Consumer(queue_name=queue, **common) for queue in workflow_queues]
    return workers


class ArqConsumers:
    """This process's arq workers, kept running through Redis outages.

    arq's worker loop ends with an exception when Redis goes away; the jobs
    it handed over keep running in the worker's pool regardless. Here a
    consumer that failed is dropped and a fresh one started after a backoff,
    until :meth:`stop`. :meth:`pause` stops taking jobs (a drain)."""

    def __init__(
        self,
        runtime: Runtime,
        redis_settings: RedisSettings,
        *,
        max_jobs: int = 8,
        poll_delay: float = POLL_DELAY,
    ) -> None:
        self.runtime = runtime
        self.redis_settings = redis_settings
        self.max_jobs = max_jobs
        self.poll_delay = poll_delay
        self.doorbell = Doorbell(redis_settings, arq_queues(runtime))
        self.workers: list[Consumer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._paused = False

    def _build(self) -> list[Consumer]:
        # No reconciler cron: the worker runs its reconciler loop itself, so
        # recovery goes on while Redis is away.
        return arq_workers(
            self.runtime,
            self.redis_settings,
            max_jobs=self.max_jobs,
            poll_delay=self.poll_delay,
            doorbell=self.doorbell,
            reconcile_cron=False,
        )

    def start(self) -> None:
        # Subscribed or not, the consumers start polling: a ring only hurries them.
        self.doorbell.start()
        self.workers = self._build()
        self._tasks = [
            asyncio.create_task(self._keep_running(i), name=f"arq-{w.queue_name}")
            for i, w in enumerate(self.workers)
        ]

    @property
    def queues(self) -> list[str]:
        return [w.queue_name for w in self.workers]

    async def _keep_running(self, index: int) -> None:
        delay = 0.2
        while True:
            worker = self.workers[index]
            try:
                await worker.async_run()
                return  # burst mode only
            except (RedisError, OSError) as exc:
                log.warning(
                    "arq consumer of %s lost Redis (%s); restarting", worker.queue_name, exc
                )
            except Exception:
                # arq re-raises what a job task raised; the consumer must go on.
                log.exception("arq consumer of %s failed; restarting", worker.queue_name)
            await _abandon(worker)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            fresh = self._build()[index]
            fresh.allow_pick_jobs = not self._paused
            self.workers[index] = fresh

    def pause(self) -> None:
        """Take no more jobs from Redis."""
        self._paused = True
        for worker in self.workers:
            worker.allow_pick_jobs = False

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for worker in self.workers:
            await _abandon(worker)
        self._tasks.clear()
        await self.doorbell.stop()


async def _abandon(worker: ArqWorker) -> None:
    """Close a consumer without waiting on Redis or on its (short) jobs."""
    for task in worker.tasks.values():
        task.cancel()
    if worker.main_task is not None:
        worker.main_task.cancel()
    pool = worker._pool  # arq keeps it private; close() would wait on Redis
    worker._pool = None
    if pool is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pool.close(close_connection_pool=True), 2.0)
