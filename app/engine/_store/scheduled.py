"""An ``activity_scheduled`` command as its task row and its history event."""

from __future__ import annotations

from typing import Any

from app.engine._history_commands import HistoryCommand
from app.engine._policy import ActivityOptions


def scheduled_task_row(run_id: str, command: HistoryCommand, now: float) -> dict[str, Any]:
    """The task row's columns of an ``activity_scheduled`` command, queued."""
    attrs = command.attrs
    timeouts = ActivityOptions.from_json(attrs["options"]).timeouts
    return {
        "run_id": run_id,
        "cmd": command.cmd,
        "activity": attrs["activity"],
        "operation_id": attrs["operation_id"],
        "input": attrs["input"],
        "input_hash": attrs["input_hash"],
        "options": attrs["options"],
        "has_reconcile": bool(attrs.get("has_reconcile")),
        "status": "scheduled",
        "scheduled_at": now,
        "next_attempt_at": now,
        "schedule_to_start_deadline": (
            now + timeouts.schedule_to_start if timeouts.schedule_to_start else None
        ),
        "schedule_to_close_deadline": (
            now + timeouts.schedule_to_close if timeouts.schedule_to_close else None
        ),
    }


def scheduled_event_data(command: HistoryCommand) -> dict[str, Any]:
    """An ``activity_scheduled`` event's data: the input lives in the task row,
    history keeps its hash only."""
    return {k: v for k, v in command.to_event_data().items() if k not in ("input", "options")}
