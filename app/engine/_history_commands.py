"""Commands a workflow issues, and how one is compared with its recorded twin.

A command is what a workflow task adds to history on behalf of the code:
schedule an activity, start or cancel a timer, record a marker. Commands are
numbered in the order the code issues them; on replay the command with number
``n`` must match the recorded command ``n`` or the run is non-deterministic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

# Event types that are commands (written by workflow tasks, carry "cmd").
ACTIVITY_SCHEDULED = "activity_scheduled"
TIMER_STARTED = "timer_started"
TIMER_CANCELLED = "timer_cancelled"
MARKER_RECORDED = "marker_recorded"
#: The code asked one activity in flight to stop (``ctx.cancel_activity``).
ACTIVITY_CANCEL_REQUESTED = "activity_cancel_requested"
#: The code started another workflow (``ctx.start_workflow``).
CHILD_WORKFLOW_REQUESTED = "child_workflow_requested"
#: The code acted on another run by workflow id (``ctx.start_run``,
#: ``ctx.cancel_run``, ``ctx.describe_run``); each is answered by a
#: ``run_command_answered`` written in the same transaction.
RUN_START_REQUESTED = "run_start_requested"
RUN_CANCEL_REQUESTED = "run_cancel_requested"
RUN_DESCRIBE_REQUESTED = "run_describe_requested"
RUN_COMMANDS = frozenset({RUN_START_REQUESTED, RUN_CANCEL_REQUESTED, RUN_DESCRIBE_REQUESTED})
COMMAND_TYPES = frozenset(
    {
        *RUN_COMMANDS,
        CHILD_WORKFLOW_REQUESTED,
        ACTIVITY_SCHEDULED,
        TIMER_STARTED,
        TIMER_CANCELLED,
        MARKER_RECORDED,
        ACTIVITY_CANCEL_REQUESTED,
    }
)

# Event types that resolve or disturb a waiting workflow (written by others).
WORKFLOW_STARTED = "workflow_started"
ACTIVITY_COMPLETED = "activity_completed"
ACTIVITY_FAILED = "activity_failed"
TIMER_FIRED = "timer_fired"
SIGNAL_RECEIVED = "signal_received"
CANCEL_REQUESTED = "cancel_requested"
DEADLINE_EXCEEDED = "deadline_exceeded"
#: The child a ``child_workflow_requested`` asked for: its run id, and whether
#: this request created it (False: a run of that id existed).
CHILD_WORKFLOW_STARTED = "child_workflow_started"
#: The answer to one of the ``RUN_COMMANDS`` (``cmd``) as the store found it.
RUN_COMMAND_ANSWERED = "run_command_answered"

# Terminal events, written by the workflow task that ends the run.
WORKFLOW_COMPLETED = "workflow_completed"
WORKFLOW_FAILED = "workflow_failed"
WORKFLOW_CANCELLED = "workflow_cancelled"
CONTINUED_AS_NEW = "continued_as_new"
WORKFLOW_TERMINATED = "workflow_terminated"
RUN_PARKED = "run_parked"
#: An operator continued a parked run (``repairbot runs resume``).
RUN_RESUMED = "run_resumed"

#: Attributes compared on replay, per command type. Others (e.g. a timer's
#: absolute fire time) legitimately differ between the original run and replay.
COMPARED_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    ACTIVITY_SCHEDULED: ("activity", "operation_id", "input_hash"),
    TIMER_STARTED: ("duration",),
    TIMER_CANCELLED: ("timer",),
    MARKER_RECORDED: ("kind", "id"),
    ACTIVITY_CANCEL_REQUESTED: ("activity", "target"),
    CHILD_WORKFLOW_REQUESTED: ("workflow", "version", "workflow_id", "input_hash"),
    RUN_START_REQUESTED: ("workflow", "version", "workflow_id", "input_hash"),
    RUN_CANCEL_REQUESTED: ("workflow_id", "reason"),
    RUN_DESCRIBE_REQUESTED: ("workflow_id", "query"),
}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def input_hash(value: Any) -> str:
    """sha256 of the canonical JSON of an activity input: same input, same hash."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


@dataclass
class HistoryCommand:
    """A command a workflow task adds to history (not a slash command, not a
    repository's shell command)."""

    cmd: int
    type: str
    attrs: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        keys = COMPARED_ATTRIBUTES[self.type]
        return {"type": self.type, **{k: self.attrs.get(k) for k in keys}}

    def to_event_data(self) -> dict[str, Any]:
        return {"cmd": self.cmd, **self.attrs}


@dataclass(frozen=True)
class RecordedEvent:
    """One history event as the replayer reads it: position, type, data (the
    row itself is ``app.engine._tables.HistoryEvent``)."""

    seq: int
    type: str
    data: dict[str, Any]

    @property
    def is_command(self) -> bool:
        return self.type in COMMAND_TYPES

    def recorded_identity(self) -> dict[str, Any]:
        keys = COMPARED_ATTRIBUTES[self.type]
        return {"type": self.type, **{k: self.data.get(k) for k in keys}}

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "data": self.data}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RecordedEvent:
        return cls(seq=int(raw["seq"]), type=str(raw["type"]), data=dict(raw["data"]))
