"""Activities that act on other runs: slash commands start, cancel, retry and
describe repair runs through the runtime, like any other client would."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.contracts.ids import REPAIR_WORKFLOW, request_workflow_id
from app.contracts.requests import RunRequest
from app.engine import (
    OPEN_STATUSES,
    PARKED_STATUSES,
    ActivityContext,
    ActivityDefn,
    RetryPolicy,
    Runtime,
    Timeouts,
    typed_activity,
)
from app.operations.run_actions import landed

DB = RetryPolicy(initial_interval=0.5, max_attempts=10)
DB_TIMEOUTS = Timeouts(start_to_close=60)
#: :class:`StartResult` ``reason`` of a retry refused because the run's fix was merged.
MERGED = "merged"


class CancelInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request: RunRequest
    reason: str


class RetryInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request: RunRequest
    author: str


class StartResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    created: bool
    #: Why no run was started: ``still running`` or ``merged``.
    reason: str | None = None


class CancelResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    cancelled: bool


class DescribeResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    exists: bool
    run_id: str | None = None
    status: str | None = None
    #: The run's ``status`` query (its state) while it is open.
    phase: dict[str, Any] | None = None
    result: Any = None
    error: Any = None


def _workflow_id(request: RunRequest) -> str:
    return request_workflow_id(request.repo_id, request.repo, request.issue_number)


@typed_activity("runs.start_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def start_repair(actx: ActivityContext, request: RunRequest) -> StartResult:
    """Start the issue's repair run unless one is active (then report that one)."""
    runtime = actx.dep(Runtime)
    started = await runtime.start_workflow(
        REPAIR_WORKFLOW, _workflow_id(request), request.model_dump(mode="json")
    )
    return StartResult(run_id=started.run_id, created=started.created)


@typed_activity("runs.cancel_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def cancel_repair(actx: ActivityContext, request: CancelInput) -> CancelResult:
    runtime = actx.dep(Runtime)
    cancelled = await runtime.cancel(_workflow_id(request.request), request.reason)
    return CancelResult(cancelled=cancelled)


@typed_activity("runs.retry_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def retry_repair(actx: ActivityContext, request: RetryInput) -> StartResult:
    """Start a fresh run after one that ended or was parked; never beside an
    active one, nor after one whose fix was merged (the dashboard's rule too)."""
    runtime = actx.dep(Runtime)
    workflow_id = _workflow_id(request.request)
    latest = await runtime.read(runtime.store.find_run, workflow_id)
    if latest is not None and latest.status in OPEN_STATUSES:
        return StartResult(run_id=latest.run_id, created=False, reason="still running")
    if latest is not None and landed(latest):
        # The fix is on the base branch: another run would repair code that no
        # longer has the bug (or fight a revert a human decides on).
        return StartResult(run_id=latest.run_id, created=False, reason=MERGED)
    if latest is not None and latest.status in PARKED_STATUSES:
        # A parked run holds the issue; retiring it records why, then a new run may start.
        await runtime.terminate(workflow_id, f"retried by @{request.author}")
    started = await runtime.start_workflow(
        REPAIR_WORKFLOW, workflow_id, request.request.model_dump(mode="json")
    )
    return StartResult(run_id=started.run_id, created=started.created)


@typed_activity("runs.describe_repair", retry=DB, timeouts=DB_TIMEOUTS)
async def describe_repair(actx: ActivityContext, request: RunRequest) -> DescribeResult:
    runtime = actx.dep(Runtime)
    run = await runtime.read(runtime.store.find_run, _workflow_id(request))
    if run is None:
        return DescribeResult(exists=False)
    status: Any = None
    if run.status in OPEN_STATUSES:
        try:
            status = await runtime.aquery(run.run_id, "status")
        except KeyError:
            status = None
    return DescribeResult(
        exists=True,
        run_id=run.run_id,
        status=run.status,
        phase=status if isinstance(status, dict) else None,
        result=run.result,
        error=run.error,
    )


ACTIVITIES: list[ActivityDefn] = [start_repair, cancel_repair, retry_repair, describe_repair]
