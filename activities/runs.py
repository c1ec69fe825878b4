"""Activities that act on other runs: slash commands start, cancel, retry and
describe repair runs through the runtime, like any other client would."""

from __future__ import annotations

from typing import Any

from app.engine.activity_context import ActivityContext
from app.engine.policy import RetryPolicy, Timeouts
from app.engine.registry import activity
from app.engine.runtime import Runtime
from app.engine.tables import OPEN_STATUSES, PARKED_STATUSES
from app.workflows.ids import REPAIR_WORKFLOW, repair_workflow_id

DB = RetryPolicy(initial_interval=0.5, max_attempts=10)
DB_TIMEOUTS = Timeouts(start_to_close=60)


def _workflow_id(request: dict[str, Any]) -> str:
    return repair_workflow_id(request["repo"], int(request["issue_number"]))


@activity("runs.start_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def start_repair(actx: ActivityContext, request: dict[str, Any]) -> dict[str, Any]:
    """Start the issue's repair run unless one is active (then report that one)."""
    runtime = actx.dep(Runtime)
    started = await runtime.start_workflow(REPAIR_WORKFLOW, _workflow_id(request), request)
    return {"run_id": started.run_id, "created": started.created}


@activity("runs.cancel_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def cancel_repair(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    runtime = actx.dep(Runtime)
    cancelled = await runtime.cancel(_workflow_id(raw["request"]), raw["reason"])
    return {"cancelled": cancelled}


@activity("runs.retry_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def retry_repair(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    """Start a fresh run after one that ended or was parked; never beside an active one."""
    runtime = actx.dep(Runtime)
    workflow_id = _workflow_id(raw["request"])
    latest = runtime.store.find_run(workflow_id)
    if latest is not None and latest.status in OPEN_STATUSES:
        return {"run_id": latest.run_id, "created": False, "reason": "still running"}
    if latest is not None and latest.status in PARKED_STATUSES:
        # A parked run holds the issue; retiring it records why, then a new run may start.
        await runtime.terminate(workflow_id, f"retried by @{raw['author']}")
    started = await runtime.start_workflow(REPAIR_WORKFLOW, workflow_id, raw["request"])
    return {"run_id": started.run_id, "created": started.created}


@activity("runs.describe_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def describe_repair(actx: ActivityContext, request: dict[str, Any]) -> dict[str, Any]:
    runtime = actx.dep(Runtime)
    run = runtime.store.find_run(_workflow_id(request))
    if run is None:
        return {"exists": False}
    status: Any = None
    if run.status in OPEN_STATUSES:
        try:
            status = runtime.query(run.run_id, "status")
        except KeyError:
            status = None
    return {
        "exists": True,
        "run_id": run.run_id,
        "status": run.status,
        "phase": status,
        "result": run.result,
        "error": run.error,
    }


ACTIVITIES = [start_repair, cancel_repair, retry_repair, describe_repair]
