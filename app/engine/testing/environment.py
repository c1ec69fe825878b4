"""The in-process environment: the real runtime on a SQLite file, driven by
a :class:`ManualClock` and a :class:`StepDispatcher`.

Nothing here sleeps. Work runs as soon as it is due; ``advance`` moves the
clock, lets what fell due run (held jobs, then a reconciler pass for timers,
expired leases and deadlines) and returns when the runtime is quiet. The
``wait_*`` helpers return as soon as the recorded state says so, and raise
:class:`RunStuck` when nothing is left to run and it still does not.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlmodel import SQLModel

from app.engine import _tables  # noqa: F401  (registers the runtime's tables)
from app.engine._client import SETTLED
from app.engine._db import make_engine
from app.engine._history import export_history
from app.engine._history_commands import RecordedEvent
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.engine._store import RunRow
from app.engine.testing.clock import ManualClock
from app.engine.testing.dispatcher import StepDispatcher
from app.engine.testing.fakes import FakeActivities

T = TypeVar("T")

#: Wall-clock seconds a wait may take before it gives up (the fakes answer at
#: once, so only a fake that blocks on purpose comes near this).
WALL_TIMEOUT = 30.0


#: A relay grace no test advances past (about 30 years).
RELAY_NEVER = 1e9


class RunStuck(AssertionError):
    """The awaited state was not reached and nothing is left to run."""


class WorkflowEnvironment:
    def __init__(self, runtime: Runtime, clock: ManualClock, fakes: FakeActivities) -> None:
        self.runtime = runtime
        self.clock = clock
        self.fakes = fakes
        self.store = runtime.store
        self.dispatcher = StepDispatcher(runtime.worker.run_job, clock)
        runtime.use_dispatcher(self.dispatcher)
        #: Set whenever a job ends or a fake is called: a wait re-checks its
        #: condition then (an activity held in flight never ends).
        self._progress = asyncio.Event()
        self._signals_sent = 0
        fakes.listeners.append(lambda _call: self._progress.set())
        self.dispatcher.listeners.append(lambda _job: self._progress.set())

    @classmethod
    @asynccontextmanager
    async def start(
        cls,
        registry: Registry,
        fakes: FakeActivities,
        *,
        database_url: str | None = None,
        clock: ManualClock | None = None,
    ) -> AsyncIterator[WorkflowEnvironment]:
        """``registry``'s workflows with ``fakes`` for all its activities, on
        ``database_url`` (a migrated database), or on a fresh SQLite file."""
        clock = clock or ManualClock()
        with tempfile.TemporaryDirectory(prefix="repairbot-kit-") as folder:
            url = database_url or f"sqlite:///{Path(folder) / 'kit.db'}"
            engine = make_engine(url)
            if database_url is None:
                SQLModel.metadata.create_all(engine)
            runtime = Runtime(
                engine,
                fakes.registry(registry),
                worker_id="kit",
                clock=clock,
                # The step dispatcher loses no job, so the relay has nothing to
                # resend; left on, a long ``advance`` would make every row
                # look lost and send it again.
                relay_grace=RELAY_NEVER,
            )
            env = cls(runtime, clock, fakes)
            await env._beat()
            try:
                yield env
            finally:
                await env.dispatcher.stop()
                await runtime.stop()
                engine.dispose()

    # -- acting ------------------------------------------------------------------------

    async def start_workflow(
        self, name: str, workflow_id: str, input: Any = None, **options: Any
    ) -> str:
        """Start a run (see ``RuntimeClient.start_workflow``); returns its run id."""
        started = await self.runtime.start_workflow(name, workflow_id, input, **options)
        return started.run_id

    async def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, dedupe_key: str | None = None
    ) -> bool:
        """Send a signal; the dedupe key defaults to a new one per call."""
        self._signals_sent += 1
        key = dedupe_key or f"kit-signal-{self._signals_sent}"
        return await self.runtime.signal(workflow_id, name, payload, dedupe_key=key)

    async def cancel(self, key: str, reason: str = "cancelled by the test") -> bool:
        run = await self.run(key)
        return await self.runtime.cancel(run.run_id, reason)

    async def advance(self, seconds: float) -> None:
        """Finish what is due now; move the clock; run everything that fell
        due; return when quiet."""
        # Work still running now happens now: a timer it starts counts from
        # this moment, not from the moved clock.
        await self.settle()
        self.clock.advance(seconds)
        await self._beat()
        self.dispatcher.release_due()
        await self.runtime.reconciler.run_once()
        await self.settle()

    async def settle(self) -> None:
        """Return when no job is running and none is due (held ones wait for the clock)."""
        async with asyncio.timeout(WALL_TIMEOUT):
            while True:
                self._raise_job_errors()
                self.dispatcher.release_due()
                if not self.dispatcher.busy:
                    return
                await self.dispatcher.next_finished()

    # -- waiting on recorded state ----------------------------------------------------

    async def wait_until(self, what: str, check: Callable[[], Awaitable[T | None]]) -> T:
        """Run jobs until ``check`` returns something other than None; raise
        :class:`RunStuck` if the runtime goes quiet first."""
        try:
            async with asyncio.timeout(WALL_TIMEOUT):
                while True:
                    self._raise_job_errors()
                    self._progress.clear()  # before the check: no progress is missed
                    found = await check()
                    if found is not None:
                        return found
                    self.dispatcher.release_due()
                    if self._progress.is_set():
                        continue  # a job ended during the check: look again
                    if not self.dispatcher.busy:
                        raise RunStuck(f"{what}: never happened; {self._quiet_state()}")
                    await self._next_progress()
        except TimeoutError:
            raise RunStuck(f"{what}: not within {WALL_TIMEOUT}s of wall time") from None

    async def wait_status(self, key: str, statuses: Sequence[str] = SETTLED) -> RunRow:
        """Until the run (run id, or newest run of a workflow id) has one of ``statuses``."""

        async def reached() -> RunRow | None:
            run = await self.runtime.read(self.store.find_run, key)
            return run if run is not None and run.status in statuses else None

        return await self.wait_until(f"{key} reaching {list(statuses)}", reached)

    async def wait_phase(self, key: str, phase: str, *, query: str = "status") -> Any:
        """Until the run's ``query`` answers a mapping whose ``phase`` is ``phase``."""

        async def reached() -> Any:
            run = await self.runtime.read(self.store.find_run, key)
            if run is None:
                return None
            if run.status not in ("running", "cancelling"):
                ended = run.result if run.error is None else run.error
                raise RunStuck(
                    f"{key} ended ({run.status}: {ended}) before phase {phase!r}; "
                    + self._quiet_state()
                )
            answer = await self.runtime.aquery(run.run_id, query)
            return answer if answer.get("phase") == phase else None

        return await self.wait_until(f"{key} reaching phase {phase!r}", reached)

    async def wait_called(self, activity: str, times: int = 1) -> None:
        """Until ``activity`` has been called (attempted) ``times`` times."""

        async def called() -> bool | None:
            return True if len(self.fakes.calls_to(activity)) >= times else None

        await self.wait_until(f"{activity} called {times} time(s)", called)

    # -- reading -----------------------------------------------------------------------

    async def run(self, key: str) -> RunRow:
        run = await self.runtime.read(self.store.find_run, key)
        if run is None:
            raise LookupError(f"no run {key!r}")
        return run

    async def query(self, key: str, name: str = "status") -> Any:
        return await self.runtime.aquery(key, name)

    async def history(self, key: str) -> list[RecordedEvent]:
        run = await self.run(key)
        return await self.runtime.read(self.store.load_events, run.run_id)

    async def export(self, key: str) -> dict[str, Any]:
        """The run's history in the format of tests/histories/*.json."""
        return await self.runtime.read(export_history, self.store, key)

    # -- internals ---------------------------------------------------------------------

    async def _next_progress(self) -> None:
        """Until a job ends or a fake is called (since the last check)."""
        await self._progress.wait()

    async def _beat(self) -> None:
        # Held attempts belong to a live worker: a reconciler pass after a long
        # advance must not take them for a dead worker's.
        await self.runtime.read(
            self.store.beat, self.runtime.worker_id, code_version=self.runtime.code_version
        )

    def _raise_job_errors(self) -> None:
        if self.dispatcher.errors:
            raise RuntimeError("a job raised inside the runtime") from self.dispatcher.errors[0]

    def _quiet_state(self) -> str:
        held = sorted(job.not_before - self.clock() for job in self.dispatcher.held.values())
        later = f"next held job due in {held[0]:.1f}s (advance the clock)" if held else "none held"
        unexpected = sorted({c.activity for c in self.fakes.unexpected})
        if unexpected:
            later += f"; activities with no fake answer were called: {unexpected}"
        return f"the runtime is quiet ({later})"
