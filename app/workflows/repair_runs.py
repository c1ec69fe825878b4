"""The issue's repair run as the slash-command (v3) and triage (v2) workflows
act on it: through the engine's run commands (``ctx.start_run``,
``ctx.cancel_run``, ``ctx.describe_run``), recorded in the caller's history,
so no activity calls the runtime. The product rules on top of them (no retry
beside an open run or after a merged fix) are decided here from the recorded
description, deterministically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.contracts.ids import request_workflow_id
from app.contracts.requests import RunRequest
from app.engine import (
    PARKED_STATUSES,
    RunDescription,
    StartedRun,
    WorkflowContext,
)
from app.operations.run_actions import LANDED
from app.workflows import repair
from app.workflows.triage_v1 import (
    FIRST_LOOK_SECONDS,
    HOLDING,
    LONGEST_LOOK_SECONDS,
    LONGEST_WAIT_SECONDS,
)

#: :class:`Retried` ``reason``: the issue's run is open, so none was started.
STILL_RUNNING = "still running"
#: :class:`Retried` ``reason``: the run's fix was merged, so none was started.
MERGED = "merged"
#: :class:`Retried` ``reason``: the parked run was asked to cancel, and it
#: was still cleaning up when the retry stopped waiting for it.
CANCELLING = "cancelling"


class Retried(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str | None
    created: bool
    #: Why no run was started: :data:`STILL_RUNNING`, :data:`MERGED` or :data:`CANCELLING`.
    reason: str | None = None


def repair_id(request: RunRequest) -> str:
    return request_workflow_id(request.repo_id, request.repo, request.issue_number)


async def start_repair(ctx: WorkflowContext, request: RunRequest) -> StartedRun:
    """Start the issue's repair run unless one holds the issue (then that one)."""
    return await ctx.start_run(repair.repair, request, id=repair_id(request))


async def cancel_repair(ctx: WorkflowContext, request: RunRequest, reason: str) -> bool:
    answer = await ctx.cancel_run(repair_id(request), reason=reason)
    return answer.cancelled


async def describe_repair(ctx: WorkflowContext, request: RunRequest) -> RunDescription:
    """The issue's newest repair run; ``query`` is its state while it is open."""
    return await ctx.describe_run(repair_id(request), query="status")


def landed(result: Any) -> bool:
    """Whether a run that ended with ``result`` merged its fix."""
    return isinstance(result, dict) and result.get("outcome") in LANDED


@dataclass(frozen=True)
class Attempt:
    """What :func:`start_repair_after_cancels` came to."""

    started: StartedRun
    #: The run holding the issue when none was started (its last look).
    holder: RunDescription | None
    #: Seconds spent waiting for a cancelling run.
    waited: float


async def start_repair_after_cancels(ctx: WorkflowContext, request: RunRequest) -> Attempt:
    """Start the issue's run; while the run holding the issue is cancelling
    (it still owns its branch and PR), look again after a doubling delay, for
    up to :data:`LONGEST_WAIT_SECONDS`. A run that ended between a start and
    the look that follows it is followed by a new start."""
    waited, delay = 0.0, FIRST_LOOK_SECONDS
    while True:
        started = await start_repair(ctx, request)
        if started.created:
            return Attempt(started, None, waited)
        seen = await describe_repair(ctx, request)
        if seen.status in HOLDING and seen.status != "cancelling":
            return Attempt(started, seen, waited)
        if seen.status == "cancelling":
            if waited >= LONGEST_WAIT_SECONDS:
                return Attempt(started, seen, waited)
            await ctx.sleep(delay)
            waited += delay
            delay = min(delay * 2, LONGEST_LOOK_SECONDS)


async def retry_repair(ctx: WorkflowContext, request: RunRequest, author: str) -> Retried:
    """Start a fresh run after one that ended or was parked; never beside an
    open one, nor after one whose fix was merged (the dashboard's rule too)."""
    seen = await describe_repair(ctx, request)
    if landed(seen.result):
        # The fix is on the base branch: another run would repair code that no
        # longer has the bug (or fight a revert a human decides on).
        return Retried(run_id=seen.run_id, created=False, reason=MERGED)
    if seen.status not in PARKED_STATUSES:
        # An open run is the answer of the start itself (``created`` False).
        started = await start_repair(ctx, request)
        reason = None if started.created else STILL_RUNNING
        return Retried(run_id=started.run_id, created=started.created, reason=reason)
    # A parked run holds the issue. Cancelled, one blocked on its code closes
    # at once; one waiting for an operator cleans up first (its branch, its
    # PR), and the new run starts once it has ended.
    await cancel_repair(ctx, request, f"retried by @{author}")
    attempt = await start_repair_after_cancels(ctx, request)
    if attempt.started.created:
        return Retried(run_id=attempt.started.run_id, created=True)
    holder = attempt.holder
    reason = CANCELLING if holder is not None and holder.status == "cancelling" else STILL_RUNNING
    return Retried(run_id=attempt.started.run_id, created=False, reason=reason)
