"""The replay core: history in, commands and an outcome out. No I/O.

A :class:`WorkflowExecution` is the live state of one run's workflow code. It
is built by replaying the whole history (``O(history)``) and may then be kept
in a worker's cache and fed only the new events of each later workflow task,
so a run of N steps costs O(N) in total, not O(N^2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.engine._context import ContinueAsNew, ReplayAborted, Signal, WorkflowContext
from app.engine._errors import (
    ActivityError,
    CleanupIncomplete,
    DeadlineExceeded,
    NeedsHuman,
    NondeterminismError,
    WorkflowCancelled,
)
from app.engine._history_commands import (
    ACTIVITY_COMPLETED,
    ACTIVITY_FAILED,
    CANCEL_REQUESTED,
    CHILD_WORKFLOW_STARTED,
    DEADLINE_EXCEEDED,
    RUN_COMMAND_ANSWERED,
    SIGNAL_RECEIVED,
    TIMER_FIRED,
    WORKFLOW_STARTED,
    HistoryCommand,
    RecordedEvent,
)
from app.engine._registry import WorkflowDefn
from app.engine._scheduler import Scheduler, Task


@dataclass(frozen=True)
class Outcome:
    """How the run ended, if it did, in this workflow task."""

    status: str  # completed | failed | cancelled | cleanup-incomplete | timed-out
    #             | needs-human | continued-as-new | blocked-nondeterministic
    result: Any = None
    error: dict[str, Any] | None = None
    continue_input: Any = None


@dataclass
class WorkflowTaskResult:
    """What one workflow task decided: new history commands and, if the run
    ended, its outcome (an activity's ``step`` is a different thing)."""

    commands: list[HistoryCommand] = field(default_factory=list)
    outcome: Outcome | None = None
    cancel_phase: str | None = None
    cancel_delivered: bool = False
    #: The last command number issued before the cancel reached the code: work
    #: scheduled up to it is stopped; the code's own cancellation handling
    #: (cleanup scheduled later, possibly in this same task) is not.
    cancel_boundary: int = 0
    #: The code asked to wait for an operator (``ctx.wait_for_operator``): why.
    park_reason: str | None = None
    #: The signal that operator's resume must send (the workflow's ``resume_signal``).
    resume_signal: str | None = None


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as JSON, or None if it can."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return f"is not JSON-serializable: {exc}"
    return None


def error_info(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


class WorkflowExecution:
    def __init__(
        self,
        defn: WorkflowDefn,
        *,
        run_id: str,
        workflow_id: str,
        max_history_events: int = 2000,
    ) -> None:
        self.defn = defn
        self.run_id = run_id
        self.workflow_id = workflow_id
        self.max_history_events = max_history_events
        self.scheduler = Scheduler()
        self.ctx = WorkflowContext(self)
        self.task_time = datetime.fromtimestamp(0).astimezone()
        self.history_length = 0
        self._recorded: dict[int, RecordedEvent] = {}
        self._issued = 0
        self._new: list[HistoryCommand] = []
        self._root: Task | None = None
        self._nondeterminism: NondeterminismError | None = None
        self._cancel_phase: str | None = None
        self._cancel_delivered = False
        self._cancel_boundary = 0
        self._deadline_delivered = False
        self.finished: Outcome | None = None

    # -- called by ctx ---------------------------------------------------------

    def next_command_number(self) -> int:
        self._issued += 1
        return self._issued

    def peek_command_number(self) -> int:
        return self._issued + 1

    def recorded_command(self, cmd: int) -> RecordedEvent | None:
        return self._recorded.get(cmd)

    def issue(self, cmd: int, type_: str, attrs: dict[str, Any]) -> None:
        command = HistoryCommand(cmd=cmd, type=type_, attrs=attrs)
        if type_ == "marker_recorded" and attrs.get("kind") == "cancel_phase":
            self._cancel_phase = str(attrs["id"])
        recorded = self._recorded.get(cmd)
        if recorded is None:
            self._new.append(command)
            return
        expected, actual = recorded.recorded_identity(), command.identity()
        if recorded.type != type_ or expected != actual:
            self._nondeterminism = NondeterminismError(cmd, expected, actual)
            raise ReplayAborted()

    def spawn(self, coro: Any, name: str) -> Task:
        return self.scheduler.spawn(coro, name)

    # -- driving ---------------------------------------------------------------

    def apply(self, events: list[RecordedEvent], *, task_time: datetime) -> WorkflowTaskResult:
        """Feed events (in history order) and run the code until it blocks."""
        self.task_time = task_time
        self._new = []
        self._cancel_phase = None
        self._cancel_delivered = False
        # Index recorded commands first: code replaying an early resolution may
        # issue a command whose record sits later in history than that resolution.
        for event in events:
            if event.is_command:
                self._recorded[int(event.data["cmd"])] = event
        for event in events:
            if self.finished is not None:
                break
            self.history_length = event.seq
            if event.is_command:
                continue
            try:
                self._apply_one(event)
            except NondeterminismError as exc:
                self._nondeterminism = exc
            except ReplayAborted:
                pass
            self._run()
        if self.finished is None:
            self._run()
        return WorkflowTaskResult(
            commands=self._new,
            outcome=self.finished,
            cancel_phase=self._cancel_phase,
            cancel_delivered=self._cancel_delivered,
            cancel_boundary=self._cancel_boundary,
            park_reason=next(
                (
                    str(c.attrs.get("reason", ""))
                    for c in reversed(self._new)
                    if c.type == "marker_recorded" and c.attrs.get("kind") == "park"
                ),
                None,
            ),
            resume_signal=self.defn.resume_signal,
        )

    def _apply_one(self, event: RecordedEvent) -> None:
        data = event.data
        if event.type == WORKFLOW_STARTED:
            self._root = self.scheduler.spawn(self.defn.fn(self.ctx, data.get("input")), "main")
        elif event.type == ACTIVITY_COMPLETED:
            self.ctx._resolve_activity(int(data["cmd"]), data.get("result"))
        elif event.type == ACTIVITY_FAILED:
            failure = ActivityError(
                str(data.get("message", "")),
                activity=str(data.get("activity", "")),
                failure_class=str(data.get("failure_class", "permanent")),
                error_type=str(data.get("error_type", "")),
                attempts=int(data.get("attempts", 0)),
                details=data.get("details") or {},
            )
            self.ctx._resolve_activity(int(data["cmd"]), error=failure)
        elif event.type == CHILD_WORKFLOW_STARTED:
            self.ctx._resolve_child(int(data["cmd"]), str(data["run_id"]))
        elif event.type == RUN_COMMAND_ANSWERED:
            self.ctx._answer_run_command(int(data["cmd"]), data.get("answer"))
        elif event.type == TIMER_FIRED:
            self.ctx._fire_timer(int(data["cmd"]))
        elif event.type == SIGNAL_RECEIVED:
            self.ctx._deliver_signal(
                Signal(
                    name=data["name"], payload=data.get("payload"), dedupe_key=data["dedupe_key"]
                )
            )
        elif event.type == CANCEL_REQUESTED:
            self.ctx.cancel_requested = True
            self.ctx.cancel_reason = str(data.get("reason", ""))
            boundary = self._issued
            if self._root is not None and self.scheduler.throw(
                self._root, WorkflowCancelled(self.ctx.cancel_reason)
            ):
                self._cancel_delivered = True
                self._cancel_boundary = boundary
                self._cancel_phase = "stopping-active-work"
        elif event.type == DEADLINE_EXCEEDED and not self._deadline_delivered:
            self._deadline_delivered = True
            if self._root is not None:
                self.scheduler.throw(self._root, DeadlineExceeded("workflow deadline passed"))

    def _run(self) -> None:
        if self._nondeterminism is None:
            self.scheduler.run_until_blocked(stop=lambda: self._nondeterminism is not None)
        if self._nondeterminism is not None:
            self.finished = Outcome(
                status="blocked-nondeterministic",
                error={"type": "NondeterminismError", "message": self._nondeterminism.diff()},
            )
            return
        root = self._root
        if root is None or not root.future.done:
            return
        self.finished = self._outcome_of(root)

    def _outcome_of(self, root: Task) -> Outcome:
        error = root.future.error
        if error is None:
            status = "cancelled" if self.ctx.cancel_requested else "completed"
            problem = json_problem(root.future.result)
            if problem:
                return Outcome(
                    status="failed",
                    error={"type": "TypeError", "message": f"workflow result {problem}"},
                )
            return Outcome(status=status, result=root.future.result)
        if isinstance(error, ReplayAborted) and self._nondeterminism is not None:
            return Outcome(
                status="blocked-nondeterministic", error=error_info(self._nondeterminism)
            )
        if isinstance(error, ContinueAsNew):
            return Outcome(status="continued-as-new", continue_input=error.input)
        if isinstance(error, WorkflowCancelled):
            return Outcome(status="cancelled", error=error_info(error))
        if isinstance(error, CleanupIncomplete):
            info = error_info(error) | {"leftovers": error.leftovers}
            return Outcome(status="cleanup-incomplete", error=info)
        if isinstance(error, DeadlineExceeded):
            return Outcome(status="timed-out", error=error_info(error))
        if isinstance(error, NeedsHuman):
            return Outcome(status="needs-human", error=error_info(error))
        return Outcome(status="failed", error=error_info(error))

    def query(self, name: str) -> Any:
        handler = self.ctx._queries.get(name)
        if handler is None:
            raise KeyError(f"workflow {self.defn.key} has no query named {name!r}")
        return handler()

    def close(self) -> None:
        self.scheduler.close()
