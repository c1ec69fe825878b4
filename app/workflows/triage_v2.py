"""The triage workflows, version 2: as version 1 (:mod:`app.workflows.triage`
says what each decides), typed, and looking at and acting on the issue's
repair run through the engine's run commands (:mod:`app.workflows.repair_runs`)
instead of the ``runs.*`` activities. Version 1 stays registered for the runs
recorded with it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.contracts import github, triage
from app.contracts.triage_inputs import CloseTriage, LabelTriage
from app.engine import TypedWorkflow, WorkflowContext, typed_workflow
from app.workflows import repair_runs
from app.workflows.calls import call
from app.workflows.permissions import permission
from app.workflows.triage import HOLDING, _say


class LabelTriaged(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    started: bool
    #: The run started, or the one already holding the issue.
    run_id: str | None = None
    #: Why no run was started.
    why: str | None = None


class CloseTriaged(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cancelled: bool
    #: Why the run was not cancelled.
    why: str | None = None


@typed_workflow("label-triage", version=2)
async def label_triage(ctx: WorkflowContext, triaged: LabelTriage) -> LabelTriaged:
    request = triaged.request
    config = await call(
        ctx,
        triage.trigger_config,
        triage.TriggerInput(
            repo=request.repo,
            installation_id=request.installation_id,
            ref=request.default_branch,
        ),
        step="config",
    )
    trigger = config.trigger_label or triaged.default_trigger
    if request.label != trigger:
        return LabelTriaged(started=False, why=f"{request.label!r} is not the trigger {trigger!r}")
    attempt = await repair_runs.start_repair_after_cancels(ctx, request)
    if attempt.started.created:
        return LabelTriaged(started=True, run_id=attempt.started.run_id)
    seen = attempt.holder
    assert seen is not None  # no run started: one holds the issue
    if seen.status == "cancelling":
        await _say(
            ctx,
            request,
            "relabel-gave-up",
            f"The `{trigger}` label was added again while run `{seen.run_id}` was "
            f"still cancelling, and it had not finished after {attempt.waited / 60:.0f} "
            "minutes, so no new run was started. Once it has ended, comment "
            "`/repair` (or label the issue again) to start one.",
        )
        return LabelTriaged(started=False, why="the cancelling run did not end in time")
    return LabelTriaged(started=False, why="a run is already active", run_id=seen.run_id)


@typed_workflow("close-triage", version=2)
async def close_triage(ctx: WorkflowContext, triaged: CloseTriage) -> CloseTriaged:
    request, closer = triaged.request, triaged.closer
    seen = await repair_runs.describe_repair(ctx, request)
    if seen.status not in HOLDING or seen.status == "cancelling":
        return CloseTriaged(cancelled=False, why="no run to cancel")
    number = seen.query.get("pull_number") if isinstance(seen.query, dict) else None
    if isinstance(number, int):
        pull = await call(
            ctx,
            github.read_pull_request,
            github.PullInput(
                repo=request.repo, installation_id=request.installation_id, number=number
            ),
            step="pull",
        )
        if pull.merged:
            # GitHub closed the issue because the run's PR merged (closing
            # keywords), whether the run or a person merged it: not a cancel.
            return CloseTriaged(cancelled=False, why=f"closed by the merge of #{number}")
    granted = await permission(
        ctx, closer, repo=request.repo, installation_id=request.installation_id, step="permission"
    )
    if not granted.may_write:
        # One comment per person per issue, however often they close it
        # (the marker does not name this triage): no comment spam by toggling.
        await _say(
            ctx,
            request,
            closer,
            f"@{closer} closed this issue, but only people with write access to this "
            f"repository can stop a repair, so run `{seen.run_id}` goes on. A maintainer "
            "can stop it with `/repair cancel`.",
            op_run=f"closed-by-reader:{request.repo_id or request.repo}#{request.issue_number}",
        )
        return CloseTriaged(cancelled=False, why=f"@{closer} has {granted.permission} access")
    cancelled = await repair_runs.cancel_repair(ctx, request, f"the issue was closed by @{closer}")
    return CloseTriaged(cancelled=cancelled)


WORKFLOWS: list[TypedWorkflow[Any, Any]] = [label_triage, close_triage]
