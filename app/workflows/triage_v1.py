"""Version 1 of the triage workflows, frozen for the runs recorded with it
(the current version and what each workflow decides: :mod:`app.workflows.triage`).
It acts on the issue's repair run through the ``runs.*`` activities.
"""

from __future__ import annotations

from typing import Any

from app.contracts import github, runs, triage
from app.contracts.requests import RunRequest
from app.contracts.triage_inputs import CloseTriage, LabelTriage
from app.engine import WorkflowContext, workflow
from app.workflows.calls import call

#: Seconds between looks at a run that is still cancelling (doubling), and
#: how long a relabel waits for it before it says why it gave up.
FIRST_LOOK_SECONDS = 2.0
LONGEST_LOOK_SECONDS = 60.0
LONGEST_WAIT_SECONDS = 3600.0
#: The run statuses that hold the issue (another run cannot start beside them).
HOLDING = frozenset({"running", "cancelling", "needs-human", "blocked-nondeterministic"})


async def _say(
    ctx: WorkflowContext, request: RunRequest, step: str, body: str, *, op_run: str | None = None
) -> None:
    """A comment on the issue; ``op_run`` (default: this triage) names its
    marker, so one shared by several triages is one comment, updated."""
    await call(
        ctx,
        github.comment,
        github.CommentInput(
            repo=request.repo,
            installation_id=request.installation_id,
            issue_number=request.issue_number,
            op_run=op_run or ctx.run_id,
            op_step=step,
            body=body,
        ),
        step=f"comment-{step}",
    )


@workflow("label-triage", version=1)
async def label_triage(ctx: WorkflowContext, raw: dict[str, Any]) -> dict[str, Any]:
    triaged = LabelTriage.model_validate(raw)
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
        return {"started": False, "why": f"{request.label!r} is not the trigger {trigger!r}"}
    waited, delay, look = 0.0, FIRST_LOOK_SECONDS, 0
    while True:
        look += 1
        started = await call(ctx, runs.start_repair, request, step=f"start-{look}")
        if started.created:
            return {"started": True, "run_id": started.run_id}
        seen = await call(ctx, runs.describe_repair, request, step=f"look-{look}")
        if seen.status in HOLDING and seen.status != "cancelling":
            return {"started": False, "why": "a run is already active", "run_id": seen.run_id}
        if seen.status == "cancelling":
            if waited >= LONGEST_WAIT_SECONDS:
                await _say(
                    ctx,
                    request,
                    "relabel-gave-up",
                    f"The `{trigger}` label was added again while run `{seen.run_id}` was "
                    f"still cancelling, and it had not finished after {waited / 60:.0f} "
                    "minutes, so no new run was started. Once it has ended, comment "
                    "`/repair` (or label the issue again) to start one.",
                )
                return {"started": False, "why": "the cancelling run did not end in time"}
            # A relabel during a cancel is a request for the next run: wait for
            # this one to finish cleaning up (it still owns its branch and PR).
            await ctx.sleep(delay)
            waited += delay
            delay = min(delay * 2, LONGEST_LOOK_SECONDS)
        # Otherwise the run ended between the two looks: start again.


@workflow("close-triage", version=1)
async def close_triage(ctx: WorkflowContext, raw: dict[str, Any]) -> dict[str, Any]:
    triaged = CloseTriage.model_validate(raw)
    request, closer = triaged.request, triaged.closer
    seen = await call(ctx, runs.describe_repair, request, step="look")
    if seen.status not in HOLDING or seen.status == "cancelling":
        return {"cancelled": False, "why": "no run to cancel"}
    number = (seen.phase or {}).get("pull_number")
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
            return {"cancelled": False, "why": f"closed by the merge of #{number}"}
    granted = await call(
        ctx,
        github.permission,
        github.PermissionInput(
            repo=request.repo, installation_id=request.installation_id, user=closer
        ),
        step="permission",
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
        return {"cancelled": False, "why": f"@{closer} has {granted.permission} access"}
    outcome = await call(
        ctx,
        runs.cancel_repair,
        runs.CancelInput(request=request, reason=f"the issue was closed by @{closer}"),
        step="cancel",
    )
    return {"cancelled": outcome.cancelled}


WORKFLOWS = [label_triage, close_triage]
