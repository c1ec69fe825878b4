"""The worker runtime: the client (:mod:`app.engine._client`) plus what runs
work: the worker, its dispatcher, the reconciler and liveness beats. The web
process builds only the client; worker processes, the embedded mode and the
tests build this."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from sqlalchemy import Engine

from app.engine._client import SETTLED, RuntimeClient
from app.engine._clock import Clock, system_clock
from app.engine._db_retry import retrying
from app.engine._dispatch import Dispatcher, InProcessDispatcher
from app.engine._jobs import Job
from app.engine._reconciler import Reconciler
from app.engine._registry import Registry
from app.engine._worker import Worker

__all__ = ["SETTLED", "Runtime", "RuntimeClient"]

log = logging.getLogger("repairbot.engine")


class Runtime(RuntimeClient):
    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        worker_id: str = "local",
        code_version: str = "dev",
        fault_point: str = "",
        max_history_events: int = 2000,
        concurrency: int = 8,
        reconcile_interval: float = 1.0,
        relay_grace: float = 2.0,
        liveness_interval: float = 1.0,
        worker_silence: float = 15.0,
        db_patience: float = 15.0,
        clock: Clock = system_clock,
    ) -> None:
        super().__init__(engine, registry, fault_point=fault_point, clock=clock)
        # One identity per process: a restarted worker that keeps its configured
        # id must not look like the live continuation of the one that died.
        self.worker_id = f"{worker_id}/{uuid.uuid4().hex[:8]}"
        self.code_version = code_version
        # Several beats per silence window, or a busy but live worker looks dead
        # and its attempts are retried (safely, thanks to fencing, but wastefully).
        self.liveness_interval = min(liveness_interval, worker_silence / 5)
        self._liveness: asyncio.Task[None] | None = None
        #: Set once this worker's first liveness beat has committed.
        self.beating = asyncio.Event()
        self._dispatch_start: asyncio.Task[None] | None = None
        self.worker = Worker(
            self.store,
            registry,
            worker_id=self.worker_id,
            code_version=code_version,
            faults=self.faults,
            max_history_events=max_history_events,
            concurrency=concurrency,
            db_patience=db_patience,
            threads=self.threads,
            clock=clock,
        )
        self.concurrency = concurrency
        self.reconcile_interval = reconcile_interval
        self.reconciler = Reconciler(
            self.store,
            # A pass's jobs go out as this worker's own do: with eager follow-ups
            # on, the retry of a dead worker's attempt starts here, in the process
            # that released it, instead of travelling through Redis to wake
            # another (on a loaded machine each process hop waits for a CPU).
            self.worker.emit,
            waiting=self.jobs_waiting,
            relay_grace=relay_grace,
            worker_silence=worker_silence,
            clock=clock,
            threads=self.threads,
        )

    # -- lifecycle ---------------------------------------------------------------

    async def start_in_process(self) -> None:
        """Embedded mode: run jobs and the reconciler in this process."""
        # Before anything runs: a worker without the body of an activity its
        # workflows call would leave that step waiting for another worker.
        self.registry.check_implemented()
        dispatcher = InProcessDispatcher(
            self.worker.run_job, concurrency=self.concurrency, clock=self.clock
        )
        self.use_dispatcher(dispatcher)
        self.start_liveness()
        # Jobs queue until the first beat (see :meth:`start_liveness`); start-up
        # itself does not wait for it, so the web of an embedded process serves
        # while the database is away.
        self._dispatch_start = asyncio.create_task(
            self._when_beating(dispatcher.start), name="dispatch-start"
        )
        self.reconciler.start(self.reconcile_interval)
        try:
            await self.reconciler.run_once()  # pick up whatever a previous process left
        except Exception:
            # The database may not be up yet: the reconciler loop keeps trying.
            log.exception("first reconciler pass failed")

    def use_dispatcher(self, dispatcher: Dispatcher, *, eager: bool = False) -> None:
        """``eager``: this process is a worker too; it runs the follow-up jobs it
        can (a run's next step) itself instead of sending them through the channel."""
        self.dispatcher = dispatcher
        self.worker.sink = self.dispatch
        self.worker.eager_capacity = self.concurrency if eager else 0
        # Claiming a run's next activity in the commit that schedules it is
        # eager execution too: only where this process runs follow-ups itself.
        self.worker.claims_eagerly = eager or isinstance(dispatcher, InProcessDispatcher)

    async def hand_on(self, jobs: list[Job]) -> None:
        """Operations made in a worker process (a run started or signalled here)
        hand their jobs to the worker, as its own follow-ups do: with eager
        follow-ups on, the run's next workflow task starts in this process
        rather than travelling through Redis; otherwise they go to the
        dispatcher as before."""
        await self.worker.emit(jobs)

    def start_liveness(self) -> None:
        """Beat this worker's liveness row until :meth:`stop` (any dispatch mode).
        The first beat is taken at once and retried like the others, so a
        worker that starts while the database is down waits for it.

        ``beating`` is set once the first beat has committed, and no job may
        be taken before (:meth:`_when_beating`): the others judge a silent
        worker by its row, so an attempt claimed by a worker that has none yet
        and dies is invisible to them and waits out its start-to-close
        timeout (minutes) instead of the worker silence."""
        self._liveness = asyncio.create_task(self._beat_forever(), name="liveness")

    async def _when_beating(self, start: Callable[[], None]) -> None:
        await self.beating.wait()
        start()

    async def _beat_forever(self) -> None:
        while True:
            try:
                await self.threads.run(
                    self.store.beat, self.worker_id, code_version=self.code_version
                )
                self.beating.set()
                # The database answers: release attempts whose outcome a blip lost.
                await self.worker.release_unrecorded()
            except Exception:
                log.exception("liveness beat failed; retrying")
            await asyncio.sleep(self.liveness_interval)

    async def stop(self, *, grace: float = 0.0) -> None:
        """Stop this process's part of the runtime. Running jobs get ``grace``
        seconds to finish; what is still running then is handed back (its
        attempt released at once), and the worker is marked retired."""
        if self._dispatch_start is not None:
            self._dispatch_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatch_start
        await self.worker.drain(grace)
        await self.reconciler.stop()
        if self._liveness is not None:
            self._liveness.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._liveness
            self._liveness = None
            try:
                await retrying(
                    lambda: self.store.retire(self.worker_id),
                    what="retiring this worker",
                    patience=min(5.0, self.worker.db_patience),
                    threads=self.threads,
                )
            except Exception:
                # Our silence will tell the others soon enough.
                log.warning("could not mark worker %s retired", self.worker_id)
        if isinstance(self.dispatcher, InProcessDispatcher):
            await self.dispatcher.stop()
        self.worker.cache.clear()
