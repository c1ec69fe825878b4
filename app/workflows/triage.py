"""Small workflows that decide, from one webhook delivery, whether a repair
run should start or stop: the questions a handler cannot answer without
GitHub (handlers make no network calls).

- ``label-triage``: is this label the repository's trigger (its config, read
  at the default branch through the contents API)? Only then does a run
  start, so another label added in the same edit (``bug`` with
  ``repairbot``: two deliveries) starts nothing and cannot hold the issue's
  run slot. A relabel while the issue's run is still cancelling waits for
  that run to end and then starts the next one.
- ``close-triage``: does closing the issue cancel its run? Not when the
  close is GitHub's side effect of merging the run's pull request (closing
  keywords, whoever merged), and only when the closer has write access; a
  reader's close leaves the run going and says so on the issue.

Both are keyed by the delivery (a redelivery is one triage). Deterministic
code only: every look at GitHub or at runs is an activity.

This is version 2 of both: typed, and looking at and acting on the issue's
repair run through the engine's run commands (:mod:`app.workflows.repair_runs`).
Version 1 (:mod:`app.workflows.triage_v1`) stays registered for the runs
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
from app.workflows.triage_v1 import HOLDING, _say


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
