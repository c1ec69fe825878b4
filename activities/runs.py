"""Activities that act on other runs: the old slash-command and triage
workflow versions start, cancel, retry and describe repair runs through the
runtime, like any other client would."""

from __future__ import annotations

from typing import Any

from app.contracts import runs
from app.contracts.ids import REPAIR_WORKFLOW, request_workflow_id
from app.contracts.requests import RunRequest
from app.contracts.runs import (
    MERGED,
    CancelInput,
    CancelResult,
    DescribeResult,
    RetryInput,
    StartResult,
)
from app.engine import (
    OPEN_STATUSES,
    PARKED_STATUSES,
    ActivityContext,
    RuntimeClient,
    implements,
)
from app.operations.run_actions import landed


def _workflow_id(request: RunRequest) -> str:
    return request_workflow_id(request.repo_id, request.repo, request.issue_number)


class RunActivities:
    def __init__(self, runtime: RuntimeClient) -> None:
        #: The worker's own runtime: these activities are clients of it.
        self.runtime = runtime

    @implements(runs.start_repair)
    async def start_repair(self, actx: ActivityContext, request: RunRequest) -> StartResult:
        """Start the issue's repair run unless one is active (then report that one)."""
        started = await self.runtime.start_workflow(
            REPAIR_WORKFLOW, _workflow_id(request), request.model_dump(mode="json")
        )
        return StartResult(run_id=started.run_id, created=started.created)

    @implements(runs.cancel_repair)
    async def cancel_repair(self, actx: ActivityContext, request: CancelInput) -> CancelResult:
        cancelled = await self.runtime.cancel(_workflow_id(request.request), request.reason)
        return CancelResult(cancelled=cancelled)

    @implements(runs.retry_repair)
    async def retry_repair(self, actx: ActivityContext, request: RetryInput) -> StartResult:
        """Start a fresh run after one that ended or was parked; never beside an
        active one, nor after one whose fix was merged (the dashboard's rule too)."""
        runtime = self.runtime
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

    @implements(runs.describe_repair)
    async def describe_repair(self, actx: ActivityContext, request: RunRequest) -> DescribeResult:
        run = await self.runtime.read(self.runtime.store.find_run, _workflow_id(request))
        if run is None:
            return DescribeResult(exists=False)
        status: Any = None
        if run.status in OPEN_STATUSES:
            try:
                status = await self.runtime.aquery(run.run_id, "status")
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
