"""The runtime as one object: store, worker, dispatcher and reconciler wired
together, plus the client operations (start, signal, cancel, terminate,
query) that the web process, handlers, CLI and tests use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from app.engine.activity_context import Dependencies
from app.engine.db_retry import retrying
from app.engine.dispatch import Dispatcher, InProcessDispatcher
from app.engine.errors import WorkflowNotFound
from app.engine.faults import FaultPoints
from app.engine.jobs import Job
from app.engine.reconciler import Reconciler
from app.engine.registry import Registry
from app.engine.replay import WorkflowExecution
from app.engine.store import RunRow, StartResult, Store, Tx
from app.engine.store.resume import resume_run
from app.engine.tables import CLOSED_STATUSES, PARKED_STATUSES
from app.engine.worker import Worker

SETTLED = (*CLOSED_STATUSES, *PARKED_STATUSES)
log = logging.getLogger("repairbot.engine")


class Runtime:
    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        worker_id: str = "local",
        code_version: str = "dev",
        deps: Dependencies | None = None,
        fault_point: str = "",
        max_history_events: int = 2000,
        concurrency: int = 8,
        reconcile_interval: float = 1.0,
        relay_grace: float = 2.0,
        liveness_interval: float = 1.0,
        worker_silence: float = 15.0,
        db_patience: float = 15.0,
    ) -> None:
        self.engine = engine
        self.registry = registry
        # One identity per process: a restarted worker that keeps its configured
        # id must not look like the live continuation of the one that died.
        self.worker_id = f"{worker_id}/{uuid.uuid4().hex[:8]}"
        self.code_version = code_version
        # Several beats per silence window, or a busy but live worker looks dead
        # and its attempts are retried (safely, thanks to fencing, but wastefully).
        self.liveness_interval = min(liveness_interval, worker_silence / 5)
        self._liveness: asyncio.Task[None] | None = None
        self.faults = FaultPoints(fault_point)
        self.store = Store(engine, faults=self.faults)
        self.worker = Worker(
            self.store,
            registry,
            worker_id=self.worker_id,
            code_version=code_version,
            deps=deps,
            faults=self.faults,
            max_history_events=max_history_events,
            concurrency=concurrency,
            db_patience=db_patience,
        )
        self.concurrency = concurrency
        self.reconcile_interval = reconcile_interval
        self.dispatcher: Dispatcher | None = None
        self.reconciler = Reconciler(
            self.store, self.dispatch, relay_grace=relay_grace, worker_silence=worker_silence
        )

    # -- lifecycle ---------------------------------------------------------------

    async def start_in_process(self) -> None:
        """Embedded mode: run jobs and the reconciler in this process."""
        dispatcher = InProcessDispatcher(self.worker.run_job, concurrency=self.concurrency)
        dispatcher.start()
        self.use_dispatcher(dispatcher)
        self.start_liveness()
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

    def start_liveness(self) -> None:
        """Beat this worker's liveness row until :meth:`stop` (any dispatch mode).
        The first beat is taken at once and retried like the others, so a
        worker that starts while the database is down waits for it."""
        self._liveness = asyncio.create_task(self._beat_forever(), name="liveness")

    async def _beat_forever(self) -> None:
        while True:
            try:
                await asyncio.to_thread(
                    self.store.beat, self.worker_id, code_version=self.code_version
                )
                # The database answers: release attempts whose outcome a blip lost.
                await self.worker.release_unrecorded()
            except Exception:
                log.exception("liveness beat failed; retrying")
            await asyncio.sleep(self.liveness_interval)

    async def stop(self, *, grace: float = 0.0) -> None:
        """Stop this process's part of the runtime. Running jobs get ``grace``
        seconds to finish; what is still running then is handed back (its
        attempt released at once), and the worker is marked retired."""
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
                )
            except Exception:
                # Our silence will tell the others soon enough.
                log.warning("could not mark worker %s retired", self.worker_id)
        if isinstance(self.dispatcher, InProcessDispatcher):
            await self.dispatcher.stop()
        self.worker.cache.clear()

    async def dispatch(self, jobs: Sequence[Job]) -> None:
        if jobs and self.dispatcher is not None:
            await self.dispatcher.enqueue(jobs)

    # -- client operations -------------------------------------------------------

    async def start_workflow(
        self,
        name: str,
        workflow_id: str,
        input: Any = None,
        *,
        version: int | None = None,
        deadline_seconds: float | None = None,
        operator: dict[str, Any] | None = None,
    ) -> StartResult:
        """``operator``: who started the run by hand and why, recorded in history."""
        with self.store.transaction() as tx:
            result = tx.start_run(
                workflow_name=name,
                workflow_version=version or self.registry.latest_version(name),
                workflow_id=workflow_id,
                input=input,
                deadline_seconds=deadline_seconds,
                operator=operator,
            )
        await self.dispatch(tx.jobs)
        return result

    def start_in(
        self,
        tx: Tx,
        name: str,
        workflow_id: str,
        input: Any = None,
        *,
        version: int | None = None,
        deadline_seconds: float | None = None,
    ) -> StartResult:
        """Start inside the caller's transaction (webhook intake); dispatch tx.jobs after."""
        return tx.start_run(
            workflow_name=name,
            workflow_version=version or self.registry.latest_version(name),
            workflow_id=workflow_id,
            input=input,
            deadline_seconds=deadline_seconds,
        )

    async def signal(self, workflow_id: str, name: str, payload: Any, *, dedupe_key: str) -> bool:
        with self.store.transaction() as tx:
            delivered = tx.signal(workflow_id, name, payload, dedupe_key)
        await self.dispatch(tx.jobs)
        return delivered

    # Operator actions take a run id or a workflow id and act only on the run
    # that is active now; ``by`` (who acted) is recorded with the reason.

    async def cancel(self, run_id: str, reason: str, *, by: str | None = None) -> bool:
        """Ask the run to cancel (its code cleans up); a parked run closes at once."""
        with self.store.transaction() as tx:
            requested = tx.request_cancel(run_id, reason, by=by)
        await self.dispatch(tx.jobs)
        return requested

    async def terminate(
        self, run_id: str, reason: str, *, by: str | None = None
    ) -> dict[str, Any] | None:
        """End the run now without running its code; returns what was left uncertain."""
        with self.store.transaction() as tx:
            return tx.terminate(run_id, reason, by=by)

    async def resume(self, run_id: str, reason: str, *, by: str | None = None) -> bool:
        """Continue a run parked in ``needs-human`` or ``blocked-nondeterministic``."""
        with self.store.transaction() as tx:
            resumed = resume_run(tx, run_id, reason, by=by)
        await self.dispatch(tx.jobs)
        return resumed

    def query(self, key: str, name: str) -> Any:
        """Answer a named query by replaying history; nothing is written."""
        run = self.store.find_run(key)
        if run is None:
            raise WorkflowNotFound(key)
        defn = self.registry.workflow(run.workflow_name, run.workflow_version)
        execution = WorkflowExecution(defn, run_id=run.run_id, workflow_id=run.workflow_id)
        try:
            execution.apply(self.store.load_events(run.run_id), task_time=datetime.now(UTC))
            return execution.query(name)
        finally:
            execution.close()

    async def wait_for(
        self, key: str, *, statuses: Sequence[str] = SETTLED, timeout: float = 30.0
    ) -> RunRow:
        """Poll until the run (or the newest run of a workflow id) reaches a status."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.store.find_run(key)
            if run is not None and run.status in statuses:
                return run
            if time.monotonic() > deadline:
                state = run.status if run else "absent"
                raise TimeoutError(f"{key} did not reach {list(statuses)} in {timeout}s ({state})")
            await asyncio.sleep(0.01)
