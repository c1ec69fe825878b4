"""Replaying recorded histories against the current code, with a report a
person can act on: which file, which workflow version, which command, what
the history holds there and what the code does now."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine._history import replay_recorded
from app.engine._history_commands import RecordedEvent
from app.engine._registry import Registry, WorkflowDefn

_POSITION = re.compile(r"at command (\d+)")


@dataclass(frozen=True)
class Divergence:
    """Where a replay left the recorded path."""

    source: str
    workflow: str
    #: The command number (``cmd``) at which the code and the history differ.
    command: int | None
    #: The history event that recorded that command (None: the code issued
    #: a command where the history has none... which replay accepts).
    recorded_seq: int | None
    recorded_step: str | None
    detail: str

    def __str__(self) -> str:
        where = f"command {self.command}" if self.command is not None else "an unknown command"
        if self.recorded_seq is not None:
            where += f" (history event {self.recorded_seq}, step {self.recorded_step!r})"
        return (
            f"{self.source}: {self.workflow} is not deterministic against its recorded "
            f"history at {where}.\n{self.detail}\n"
            "A change that alters the commands a recorded run issued must be taken "
            "behind ctx.patched('<change-id>') (see docs/developing.md)."
        )


class Replayer:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def replay(
        self, history: dict[str, Any] | Path, *, defn: WorkflowDefn | None = None
    ) -> Divergence | None:
        """None when the code follows the history; else where it diverges."""
        source = "history"
        if isinstance(history, Path):
            source = history.name
            history = json.loads(history.read_text())
        assert isinstance(history, dict)
        report = replay_recorded(history, self.registry, defn=defn)
        if report.ok:
            return None
        detail = report.problem or "replay was blocked"
        found = _POSITION.search(detail)
        command = int(found.group(1)) if found else None
        recorded = next(
            (
                e
                for e in history["events"]
                if command is not None
                and RecordedEvent.from_json(e).is_command
                and e["data"].get("cmd") == command
            ),
            None,
        )
        step = None
        if recorded is not None:
            step = str(recorded["data"].get("operation_id", recorded["type"])).rpartition(":")[2]
        return Divergence(
            source=source,
            workflow=f"{history['workflow']}@{history['version']}",
            command=command,
            recorded_seq=recorded["seq"] if recorded is not None else None,
            recorded_step=step,
            detail=detail,
        )

    def check(self, history: dict[str, Any] | Path, *, defn: WorkflowDefn | None = None) -> None:
        """Raise ``AssertionError`` with the divergence if there is one."""
        divergence = self.replay(history, defn=defn)
        if divergence is not None:
            raise AssertionError(str(divergence))
