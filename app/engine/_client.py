"""The runtime's client: what the web process, the CLI and handlers need to
start and steer runs, without any of the worker's machinery.

A client writes the durable state change (one short transaction on the
store's threads, never on the event loop) and hands the jobs it produced to
its dispatcher, if it has one; without one, a worker's relay picks them up.
The worker runtime (:class:`app.engine._runtime.Runtime`) extends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel
from sqlalchemy import Engine

from app.engine._clock import Clock, clock_datetime, system_clock
from app.engine._dispatch import Dispatcher
from app.engine._errors import WorkflowNotFound
from app.engine._faults import FaultPoints
from app.engine._history_commands import RecordedEvent
from app.engine._jobs import Job
from app.engine._registry import Registry
from app.engine._replay import WorkflowExecution
from app.engine._store import RunRow, StartResult, Store, Tx
from app.engine._store.async_store import StoreThreads
from app.engine._store.resume import resume_run
from app.engine._tables import CLOSED_STATUSES, PARKED_STATUSES
from app.engine._typed import SignalDefn, TypedWorkflow

SETTLED = (*CLOSED_STATUSES, *PARKED_STATUSES)
log = logging.getLogger("repairbot.engine")

P = ParamSpec("P")
T = TypeVar("T")
I = TypeVar("I", bound=BaseModel)  # noqa: E741
R = TypeVar("R", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)


class RuntimeClient:
    """Start, signal, cancel, terminate, resume, query and read runs."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        fault_point: str = "",
        threads: StoreThreads | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.faults = FaultPoints(fault_point)
        #: The one clock of this runtime (see app/engine/_clock.py).
        self.clock = clock
        self.store = Store(engine, faults=self.faults, clock=clock)
        self.store.answer_query = self._described_query
        #: The one way from a coroutine to the store (see async_store).
        self.threads = threads or StoreThreads.for_engine(engine)
        self.dispatcher: Dispatcher | None = None

    def use_dispatcher(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def dispatch(self, jobs: Sequence[Job]) -> None:
        if jobs and self.dispatcher is not None:
            await self.dispatcher.enqueue(jobs)

    async def jobs_waiting(self, jobs: Sequence[Job]) -> set[str]:
        """Which of ``jobs`` merely wait in the dispatch channel (see
        :meth:`Dispatcher.waiting`); without a channel, none."""
        if not jobs or self.dispatcher is None:
            return set()
        return await self.dispatcher.waiting(jobs)

    async def read(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """A store read from a coroutine: ``await client.read(client.store.find_run, key)``."""
        return await self.threads.run(fn, *args, **kwargs)

    async def _write(self, change: Callable[[Tx], T], *, alone: bool = False) -> T:
        """``change`` in one transaction on the store's threads; then its jobs go out.
        ``alone``: on PostgreSQL ``change`` writes exactly one statement (reads
        aside), sent in autocommit: its own transaction, without the round
        trips of ``BEGIN`` and ``COMMIT``."""

        def transact() -> tuple[T, list[Job]]:
            postgres = self.store.engine.dialect.name == "postgresql"
            opened = self.store.one_statement() if alone and postgres else self.store.transaction()
            with opened as tx:
                outcome = change(tx)
            return outcome, tx.jobs

        outcome, jobs = await self.threads.run(transact)
        await self.hand_on(jobs)
        return outcome

    async def hand_on(self, jobs: list[Job]) -> None:
        """Where the jobs of this client's own operations go: its dispatcher."""
        await self.dispatch(jobs)

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
        # On PostgreSQL a start is one statement (``START_AND_QUEUE``).
        return await self._write(
            lambda tx: tx.start_run(
                workflow_name=name,
                workflow_version=version or self.registry.latest_version(name),
                workflow_id=workflow_id,
                input=input,
                deadline_seconds=deadline_seconds,
                operator=operator,
            ),
            alone=True,
        )

    async def start(
        self,
        workflow: TypedWorkflow[I, R],
        input: I,
        *,
        id: str,
        deadline_seconds: float | None = None,
    ) -> StartResult:
        """Start a typed workflow at its declared version; ``input`` is validated."""
        return await self.start_workflow(
            workflow.name,
            id,
            workflow.dump(input),
            version=workflow.version,
            deadline_seconds=deadline_seconds,
        )

    async def send(
        self, workflow_id: str, signal: SignalDefn[M], payload: M, *, dedupe_key: str
    ) -> bool:
        """A typed signal: ``payload`` is validated (InputRejected if malformed)."""
        return await self.signal(
            workflow_id, signal.name, signal.payload(payload), dedupe_key=dedupe_key
        )

    async def signal(self, workflow_id: str, name: str, payload: Any, *, dedupe_key: str) -> bool:
        """Deliver a signal once per dedupe key. A signal the run's typed
        workflow declares is validated first: a malformed payload raises
        :class:`InputRejected` and nothing is stored."""

        def deliver(tx: Tx) -> bool:
            checked = payload
            if self._any_declares(name):  # else spare the read
                declared = self._declared_signal(tx.active_run(workflow_id), name)
                checked = payload if declared is None else declared.payload(payload)
            return tx.signal(workflow_id, name, checked, dedupe_key)

        return await self._write(deliver)

    def _any_declares(self, name: str) -> bool:
        return any(
            isinstance(defn, TypedWorkflow) and defn.signal_named(name) is not None
            for defn in self.registry.workflows.values()
        )

    def _declared_signal(self, run: RunRow | None, name: str) -> SignalDefn[Any] | None:
        if run is None or not self.registry.has_workflow(run.workflow_name, run.workflow_version):
            return None
        defn = self.registry.workflow(run.workflow_name, run.workflow_version)
        return defn.signal_named(name) if isinstance(defn, TypedWorkflow) else None

    # Operator actions take a run id or a workflow id and act only on the run
    # that is active now; ``by`` (who acted) is recorded with the reason.

    async def cancel(self, run_id: str, reason: str, *, by: str | None = None) -> bool:
        """Ask the run to cancel (its code cleans up); a parked run closes at once."""
        return await self._write(lambda tx: tx.request_cancel(run_id, reason, by=by))

    async def terminate(
        self, run_id: str, reason: str, *, by: str | None = None
    ) -> dict[str, Any] | None:
        """End the run now without running its code; returns what was left uncertain."""
        # Its retractions are not sent: a delayed job of a closed run finds
        # nothing to do when it fires.
        return await self.threads.run(self._terminate, run_id, reason, by)

    def _terminate(self, run_id: str, reason: str, by: str | None) -> dict[str, Any] | None:
        with self.store.transaction() as tx:
            return tx.terminate(run_id, reason, by=by)

    async def resume(self, run_id: str, reason: str, *, by: str | None = None) -> bool:
        """Continue a run parked in ``needs-human`` or ``blocked-nondeterministic``."""
        return await self._write(lambda tx: resume_run(tx, run_id, reason, by=by))

    def query(self, key: str, name: str) -> Any:
        """Answer a named query by replaying history; nothing is written.
        Blocking: for the CLI and threads; coroutines use :meth:`aquery`."""
        run = self.store.find_run(key)
        if run is None:
            raise WorkflowNotFound(key)
        return self._replayed_query(run, self.store.load_events(run.run_id), name)

    def _replayed_query(self, run: RunRow, events: list[RecordedEvent], name: str) -> Any:
        defn = self.registry.workflow(run.workflow_name, run.workflow_version)
        execution = WorkflowExecution(defn, run_id=run.run_id, workflow_id=run.workflow_id)
        try:
            execution.apply(events, task_time=clock_datetime(self.clock))
            return execution.query(name)
        finally:
            execution.close()

    def _described_query(self, run: RunRow, events: list[RecordedEvent], name: str) -> Any:
        """A query answer for ``ctx.describe_run``: None rather than an error
        when the run has no such query or its code cannot answer, so that one
        run's trouble never fails the commit of the run describing it."""
        try:
            return self._replayed_query(run, events, name)
        except Exception:
            log.warning("query %r of run %s unanswerable", name, run.run_id, exc_info=True)
            return None

    async def aquery(self, key: str, name: str) -> Any:
        """:meth:`query` from a coroutine (the reads and the replay off the loop)."""
        return await self.threads.run(self.query, key, name)

    async def wait_for(
        self, key: str, *, statuses: Sequence[str] = SETTLED, timeout: float = 30.0
    ) -> RunRow:
        """Poll until the run (or the newest run of a workflow id) reaches a status."""
        deadline = time.monotonic() + timeout
        while True:
            run = await self.threads.run(self.store.find_run, key)
            if run is not None and run.status in statuses:
                return run
            if time.monotonic() > deadline:
                state = run.status if run else "absent"
                raise TimeoutError(f"{key} did not reach {list(statuses)} in {timeout}s ({state})")
            await asyncio.sleep(0.01)
