"""Recorded histories: export a run's history to JSON, and replay a recorded
history against the current code to prove a change is safe for runs in flight."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.engine._errors import WorkflowNotFound
from app.engine._history_commands import RecordedEvent
from app.engine._registry import Registry, WorkflowDefn
from app.engine._replay import WorkflowExecution
from app.engine._store import Store

FORMAT = "repairbot-history/1"


def export_history(store: Store, key: str) -> dict[str, Any]:
    run = store.find_run(key)
    if run is None:
        raise WorkflowNotFound(key)
    return {
        "format": FORMAT,
        "workflow": run.workflow_name,
        "version": run.workflow_version,
        "workflow_id": run.workflow_id,
        "run_id": run.run_id,
        "status": run.status,
        "events": [e.to_json() for e in store.load_events(run.run_id)],
    }


@dataclass(frozen=True)
class ReplayReport:
    ok: bool
    commands_matched: int
    new_commands: list[dict[str, Any]]
    outcome: str | None
    problem: str | None


def replay_recorded(
    history: dict[str, Any], registry: Registry, *, defn: WorkflowDefn | None = None
) -> ReplayReport:
    """Replay ``history`` against the code registered for its workflow version
    (or ``defn``). Not ok if the code issues a different command anywhere in
    the recorded part; new commands past the end are fine (the run would go on)."""
    if history.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    defn = defn or registry.workflow(history["workflow"], int(history["version"]))
    events = [RecordedEvent.from_json(e) for e in history["events"]]
    execution = WorkflowExecution(
        defn, run_id=history["run_id"], workflow_id=history["workflow_id"]
    )
    try:
        step = execution.apply(events, task_time=datetime.now(UTC))
    finally:
        execution.close()
    recorded = sum(1 for e in events if e.is_command)
    outcome = step.outcome.status if step.outcome else None
    problem = None
    if outcome == "blocked-nondeterministic" and step.outcome is not None:
        problem = str((step.outcome.error or {}).get("message"))
    return ReplayReport(
        ok=problem is None,
        commands_matched=recorded,
        new_commands=[c.identity() for c in step.commands],
        outcome=outcome,
        problem=problem,
    )
