"""``ctx``: everything workflow code may use to act on the world.

Every method here either issues a numbered command (checked against history on
replay) or reads recorded history. Nothing reads the clock, randomness or I/O.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from pydantic import BaseModel

from app.engine._errors import NondeterminismError
from app.engine._history_commands import (
    ACTIVITY_CANCEL_REQUESTED,
    ACTIVITY_SCHEDULED,
    CHILD_WORKFLOW_REQUESTED,
    MARKER_RECORDED,
    RUN_CANCEL_REQUESTED,
    RUN_DESCRIBE_REQUESTED,
    RUN_START_REQUESTED,
    TIMER_CANCELLED,
    TIMER_STARTED,
    input_hash,
)
from app.engine._registry import (
    ENGINE_CANCEL_PHASES,
    LEGACY_CANCEL_PHASES,
    OPERATOR_RESUME,
    ActivityDefn,
    WorkflowDefn,
)
from app.engine._run_commands import CancelledRun, RunDescription, StartedRun
from app.engine._scheduler import WorkflowFuture
from app.engine._typed import SignalDefn, TypedActivity, TypedFuture, TypedWorkflow, dump_input

if TYPE_CHECKING:
    from app.engine._replay import WorkflowExecution

__all__ = ["CANCEL_PHASES", "OPERATOR_RESUME", "WorkflowContext"]

I = TypeVar("I", bound=BaseModel)  # noqa: E741
R = TypeVar("R", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)

#: Deprecated: the engine's phases plus repair's. A workflow's allowed phases
#: are ``defn.allowed_cancel_phases()``; kept for code that imports this name.
CANCEL_PHASES = (*ENGINE_CANCEL_PHASES, *LEGACY_CANCEL_PHASES)
_UUID_NAMESPACE = uuid.UUID("6f1d7a52-6a3b-4f0e-9c39-6a1f0e2b9d11")


class ContinueAsNew(BaseException):
    """Control flow: end this run and start a fresh one with ``input``.

    A BaseException so that ``except Exception`` in workflow code does not
    swallow it.
    """

    def __init__(self, input: Any) -> None:
        super().__init__("continue-as-new")
        self.input = input


class ReplayAborted(BaseException):
    """Stops workflow code at once when replay found non-determinism."""


@dataclass(frozen=True)
class Signal:
    name: str
    payload: Any
    dedupe_key: str


class WorkflowContext:
    def __init__(self, execution: WorkflowExecution) -> None:
        self._x = execution
        self.run_id = execution.run_id
        self.workflow_id = execution.workflow_id
        self._queries: dict[str, Callable[[], Any]] = {}
        # Signals nobody waited for yet, and waiters, both in arrival order.
        self._signal_buffer: deque[Signal] = deque()
        self._signal_waiters: list[_SignalWaiter] = []
        self._timers: dict[int, WorkflowFuture] = {}
        self._activities: dict[int, WorkflowFuture] = {}
        self._activity_names: dict[int, str] = {}
        self._uuid_count = 0
        #: Typed calls without ``step=`` per activity name: their derived step ids.
        self._step_counts: dict[str, int] = {}
        self._children: dict[int, WorkflowFuture] = {}
        self._run_commands: dict[int, WorkflowFuture] = {}
        self.cancel_requested = False
        self.cancel_reason = ""

    # -- commands --------------------------------------------------------------

    def activity(
        self,
        defn: ActivityDefn,
        input: Any = None,
        *,
        step: str | None = None,
        operation_id: str | None = None,
    ) -> WorkflowFuture:
        """Schedule an activity; await the returned future for its result.

        The untyped form (dicts in and out, hand-named steps); new code uses
        :meth:`call` / :meth:`schedule` with a typed activity.

        The operation id is ``<run id>:<step>`` unless given. Steps must be
        unique within a run: reusing an operation id with different input is
        an error, never a retry.
        """
        cmd = self._x.next_command_number()
        op = operation_id or f"{self.run_id}:{step or f'{cmd}-{defn.name}'}"
        attrs = {
            "activity": defn.name,
            "operation_id": op,
            "input": input,
            "input_hash": input_hash(input),
            "options": defn.options.to_json(),
            "has_reconcile": defn.reconcile is not None,
        }
        self._x.issue(cmd, ACTIVITY_SCHEDULED, attrs)
        future = WorkflowFuture(label=f"activity {defn.name} ({op})")
        self._activities[cmd] = future
        self._activity_names[cmd] = defn.name
        return future

    def schedule(
        self, defn: TypedActivity[I, R], input: I, *, step: str | None = None
    ) -> TypedFuture[R]:
        """Schedule a typed activity; await the returned future for its result.

        ``input`` is validated and recorded as JSON (late fields left out).
        Without ``step`` the step id is derived: ``<activity>-<n>`` for the
        n-th such call of that activity in this run, so it stays the same on
        replay and does not move when other code is added between calls (it
        is usable in a GitHub marker). A ``step=`` of that shape would clash:
        name steps otherwise."""
        from app.engine._typed import validated  # the one validation path

        checked = validated(defn.input_type, input, f"activity {defn.name} input")
        if step is None:
            count = self._step_counts.get(defn.name, 0) + 1
            self._step_counts[defn.name] = count
            step = f"{defn.name}-{count}"
        future = self.activity(defn, dump_input(checked), step=step)
        return TypedFuture(future, defn.result_type)  # type: ignore[arg-type]

    async def call(self, defn: TypedActivity[I, R], input: I, *, step: str | None = None) -> R:
        """Run a typed activity and return its validated result (see :meth:`schedule`)."""
        return await self.schedule(defn, input, step=step)

    def start_workflow(self, workflow: TypedWorkflow[I, R], input: I, *, id: str) -> WorkflowFuture:
        """Start workflow ``id`` (a child run); resolves with its run id.

        A recorded command: the run starts in the same transaction that
        records the request, so a crash starts it exactly once or not at all,
        and replay never starts it again. Idempotent by id: if a run of
        ``id`` exists already (open or closed) none is started and the
        future resolves with that run's id. The child is a run of its own:
        cancelling or ending this run does not cancel it."""
        cmd = self._x.next_command_number()
        recorded_input = workflow.dump(input)
        attrs = {
            "workflow": workflow.name,
            "version": workflow.version,
            "workflow_id": id,
            "input": recorded_input,
            "input_hash": input_hash(recorded_input),
        }
        self._x.issue(cmd, CHILD_WORKFLOW_REQUESTED, attrs)
        future = WorkflowFuture(label=f"start {workflow.name} ({id})")
        self._children[cmd] = future
        return future

    # Acting on other runs by workflow id. Each is a recorded command carried
    # out in the transaction that records it, answer included: replay reads
    # the answer, so a command acts once per (run, command number) whatever
    # happens to the worker, and a new run under the same id can follow one
    # that ended (unlike ``start_workflow``, which starts an id once ever).

    @overload
    def start_run(
        self, workflow: TypedWorkflow[I, R], input: I, *, id: str
    ) -> TypedFuture[StartedRun]: ...
    @overload
    def start_run(
        self, workflow: WorkflowDefn, input: Any, *, id: str
    ) -> TypedFuture[StartedRun]: ...
    def start_run(self, workflow: WorkflowDefn, input: Any, *, id: str) -> TypedFuture[StartedRun]:
        """Start ``workflow`` under ``id`` unless a run under ``id`` is open;
        then that run is the answer (``created`` False). A run that ended does
        not stop a new one. The run is not a child: it outlives this one.
        A typed workflow's input is validated; an untyped one's is recorded as
        given (JSON)."""
        recorded_input = workflow.dump(input) if isinstance(workflow, TypedWorkflow) else input
        attrs = {
            "workflow": workflow.name,
            "version": workflow.version,
            "workflow_id": id,
            "input": recorded_input,
            "input_hash": input_hash(recorded_input),
        }
        return self._run_command(RUN_START_REQUESTED, attrs, f"start {id}", StartedRun)

    def cancel_run(self, id: str, *, reason: str) -> TypedFuture[CancelledRun]:
        """Ask the open (or parked) run under ``id`` to cancel, as an operator's
        cancel does; ``reason`` is recorded in its history."""
        attrs = {"workflow_id": id, "reason": reason}
        return self._run_command(RUN_CANCEL_REQUESTED, attrs, f"cancel {id}", CancelledRun)

    def describe_run(self, id: str, *, query: str | None = None) -> TypedFuture[RunDescription]:
        """The newest run under ``id``: status, result, error and, while it is
        open, its answer to ``query``. A recorded read: replay gets the same."""
        attrs = {"workflow_id": id, "query": query}
        return self._run_command(RUN_DESCRIBE_REQUESTED, attrs, f"describe {id}", RunDescription)

    def _run_command(
        self, type_: str, attrs: dict[str, Any], label: str, answer: type[M]
    ) -> TypedFuture[M]:
        cmd = self._x.next_command_number()
        self._x.issue(cmd, type_, attrs)
        future = WorkflowFuture(label=label)
        self._run_commands[cmd] = future
        return TypedFuture(future, answer)

    @overload
    def wait_for(self, signal: SignalDefn[M]) -> Awaitable[M]: ...
    @overload
    def wait_for(self, signal: SignalDefn[M], *, timeout: float) -> Awaitable[M | None]: ...
    def wait_for(
        self, signal: SignalDefn[M], *, timeout: float | None = None
    ) -> Awaitable[M | None]:
        """The payload of the next ``signal``, validated as its model (None on timeout)."""
        return _SignalPayload(self.wait_signal(signal.name, timeout=timeout), signal)

    def cancel_activity(self, future: WorkflowFuture | TypedFuture[Any]) -> WorkflowFuture:
        """Ask the activity behind ``future`` to stop; resolves once it has ended.

        Recorded in history (so replay issues it at the same point) and
        committed with this workflow task: the task's ``cancel_requested`` is
        set in that same transaction, so the running attempt learns it at its
        next heartbeat even if this worker dies right after the commit; a
        queued one never starts. The returned future never fails: however the
        activity ended (stopped, finished first, failed) is on ``future``.
        """
        if isinstance(future, TypedFuture):
            future = future.future
        cmd = next((n for n, f in self._activities.items() if f is future), None)
        if cmd is None:
            raise ValueError(f"{future.label or 'this future'} is not an activity of this run")
        if not future.done:
            request = self._x.next_command_number()
            attrs = {"target": cmd, "activity": self._activity_names[cmd]}
            self._x.issue(request, ACTIVITY_CANCEL_REQUESTED, attrs)
        return _settle_all([future])

    def sleep(self, seconds: float) -> WorkflowFuture:
        """A durable timer: survives crashes and holds no worker while waiting."""
        cmd = self._start_timer(seconds)
        return self._timers[cmd]

    def _start_timer(self, seconds: float) -> int:
        cmd = self._x.next_command_number()
        fire_at = self._x.task_time + timedelta(seconds=seconds)
        self._x.issue(cmd, TIMER_STARTED, {"duration": seconds, "fire_at": fire_at.isoformat()})
        self._timers[cmd] = WorkflowFuture(label=f"timer {cmd}")
        return cmd

    def wait_signal(
        self, name: str | Sequence[str], *, timeout: float | None = None
    ) -> WorkflowFuture:
        """Resolves with the next :class:`Signal` whose name is ``name`` (or one of
        the names), in the order signals arrived; ``None`` on timeout."""
        names = frozenset([name] if isinstance(name, str) else name)
        future = WorkflowFuture(label=f"signal {'|'.join(sorted(names))}")
        for signal in self._signal_buffer:
            if signal.name in names:
                self._signal_buffer.remove(signal)
                future.set_result(signal)
                return future
        timer_cmd = self._start_timer(timeout) if timeout is not None else None
        waiter = _SignalWaiter(future, names, timer_cmd)
        self._signal_waiters.append(waiter)
        if timer_cmd is not None:

            def timed_out(_timer: WorkflowFuture) -> None:
                if waiter in self._signal_waiters:
                    self._signal_waiters.remove(waiter)
                future.set_result(None)

            self._timers[timer_cmd].add_done_callback(timed_out)
        return future

    def gather(self, *awaitables: Awaitable[Any]) -> WorkflowFuture:
        """Wait for all; results in argument order; the first error (in order) is raised."""
        children: list[WorkflowFuture] = []
        for index, aw in enumerate(awaitables):
            if isinstance(aw, WorkflowFuture):
                children.append(aw)
            else:
                children.append(self._x.spawn(_as_coroutine(aw), f"gather-{index}").future)
        result = WorkflowFuture(label="gather")
        pending = {id(c) for c in children}

        def settle(done: WorkflowFuture) -> None:
            pending.discard(id(done))
            if pending:
                return
            for child in children:
                if child.error is not None:
                    result.set_error(child.error)
                    return
            result.set_result([child.result for child in children])

        if not children:
            result.set_result([])
        for child in children:
            child.add_done_callback(settle)
        return result

    def now(self) -> datetime:
        """The current time, recorded on first execution and replayed after."""
        cmd = self._x.next_command_number()
        recorded = self._x.recorded_command(cmd)
        value = self._x.task_time.isoformat() if recorded is None else recorded.data["value"]
        self._x.issue(cmd, MARKER_RECORDED, {"kind": "now", "id": None, "value": value})
        return datetime.fromisoformat(value)

    def uuid(self) -> str:
        """A UUID derived from the run id and a counter: the same on every replay."""
        self._uuid_count += 1
        return str(uuid.uuid5(_UUID_NAMESPACE, f"{self.run_id}:{self._uuid_count}"))

    def patched(self, change_id: str) -> bool:
        """True on new code paths; False while replaying history made before the change."""
        cmd = self._x.peek_command_number()
        recorded = self._x.recorded_command(cmd)
        if recorded is None:
            self._x.next_command_number()
            self._x.issue(cmd, MARKER_RECORDED, {"kind": "patch", "id": change_id})
            return True
        if (
            recorded.type == MARKER_RECORDED
            and recorded.data.get("kind") == "patch"
            and recorded.data.get("id") == change_id
        ):
            self._x.next_command_number()
            self._x.issue(cmd, MARKER_RECORDED, {"kind": "patch", "id": change_id})
            return True
        return False

    def continue_as_new(self, input: Any) -> ContinueAsNew:
        """``raise ctx.continue_as_new(new_input)`` ends this run and starts a fresh one."""
        return ContinueAsNew(input)

    @property
    def should_continue_as_new(self) -> bool:
        """True once history passes the configured cap: time to continue-as-new."""
        return self._x.history_length >= self._x.max_history_events

    # -- operators -------------------------------------------------------------

    def wait_for_operator(self, reason: str) -> WorkflowFuture:
        """Park the run as ``needs-human`` and wait until an operator resumes it.

        The run holds no worker while parked (signals, timers and activity
        results wait until it is resumed). Resolves with the ``operator_resume``
        :class:`Signal` (payload: ``reason``, ``by``). A cancel reaches the
        code here like anywhere else, so cleanup still runs.
        """
        cmd = self._x.next_command_number()
        signal = self._x.defn.resume_signal
        attrs: dict[str, Any] = {"kind": "park", "id": None, "reason": reason}
        if signal != OPERATOR_RESUME:
            attrs["resume_signal"] = signal  # not compared on replay: meaning unchanged
        self._x.issue(cmd, MARKER_RECORDED, attrs)
        return self.wait_signal(signal)

    # -- cancellation ----------------------------------------------------------

    def stop_active_work(self) -> WorkflowFuture:
        """Resolves once every activity still in flight has ended (it was told to stop)."""
        self._record_cancel_phase("stopping-active-work")
        return _settle_all([f for f in self._activities.values() if not f.done])

    def enter_cancel_phase(self, phase: str) -> None:
        """Record progress through cancellation: one of the phases the workflow
        declared (``cancel_phases``) or the engine's own."""
        allowed = self._x.defn.allowed_cancel_phases()
        if phase not in allowed:
            raise ValueError(f"unknown cancel phase {phase!r}; expected one of {allowed}")
        self._record_cancel_phase(phase)

    def _record_cancel_phase(self, phase: str) -> None:
        cmd = self._x.next_command_number()
        self._x.issue(cmd, MARKER_RECORDED, {"kind": "cancel_phase", "id": phase})

    # -- queries ---------------------------------------------------------------

    def set_query(self, name: str, handler: Callable[[], Any]) -> None:
        """Answer query ``name`` from replayed state; the handler must not change it."""
        self._queries[name] = handler

    # -- event application (called by the execution, never by workflow code) --

    def _resolve_activity(
        self, cmd: int, value: Any = None, error: BaseException | None = None
    ) -> None:
        future = self._activities.get(cmd)
        if future is None:
            raise NondeterminismError(cmd, {"resolution for": cmd}, {"no activity issued": cmd})
        if error is not None:
            future.set_error(error)
        else:
            future.set_result(value)

    def _resolve_child(self, cmd: int, run_id: str) -> None:
        future = self._children.get(cmd)
        if future is None:
            raise NondeterminismError(cmd, {"child start for": cmd}, {"no child requested": cmd})
        future.set_result(run_id)

    def _answer_run_command(self, cmd: int, answer: Any) -> None:
        future = self._run_commands.get(cmd)
        if future is None:
            raise NondeterminismError(cmd, {"answer for": cmd}, {"no run command issued": cmd})
        future.set_result(answer)

    def _fire_timer(self, cmd: int) -> None:
        future = self._timers.get(cmd)
        if future is not None:
            future.set_result(None)

    def _deliver_signal(self, signal: Signal) -> None:
        for waiter in self._signal_waiters:
            if signal.name in waiter.names:
                self._signal_waiters.remove(waiter)
                waiter.future.set_result(signal)
                timer_cmd = waiter.timer_cmd
                if timer_cmd is not None and not self._timers[timer_cmd].done:
                    cancel_cmd = self._x.next_command_number()
                    self._x.issue(cancel_cmd, TIMER_CANCELLED, {"timer": timer_cmd})
                    self._timers[timer_cmd].set_result(None)
                return
        self._signal_buffer.append(signal)

    def pending_signals(self, name: str) -> int:
        return sum(1 for signal in self._signal_buffer if signal.name == name)


@dataclass(eq=False)
class _SignalWaiter:
    future: WorkflowFuture
    names: frozenset[str]
    timer_cmd: int | None


def _settle_all(futures: list[WorkflowFuture]) -> WorkflowFuture:
    """Resolves (never fails) once every future has ended, however it ended."""
    result = WorkflowFuture(label="settle")
    pending = {id(f) for f in futures}

    def settle(done: WorkflowFuture) -> None:
        pending.discard(id(done))
        if not pending:
            result.set_result(len(futures))

    if not futures:
        result.set_result(0)
    for future in futures:
        future.add_done_callback(settle)
    return result


def _as_coroutine(aw: Awaitable[Any]) -> Coroutine[Any, Any, Any]:
    async def run() -> Any:
        return await aw

    return run()


class _SignalPayload(Generic[M]):
    """Awaits a signal future; answers its payload as the signal's model."""

    __slots__ = ("future", "signal")

    def __init__(self, future: WorkflowFuture, signal: SignalDefn[M]) -> None:
        self.future = future
        self.signal = signal

    def __await__(self) -> Generator[WorkflowFuture, None, M | None]:
        received = yield from self.future.__await__()
        if received is None:
            return None
        # Validated at send time already; this only gives the payload its type.
        return self.signal.model.model_validate(received.payload)
