"""The onboarding workflow: one per repository the App is installed on.

Keyed by repository id (:func:`onboarding_workflow_id`), so a redelivered
installation event, or the repository added again later, finds the run (or
the proposal it made) instead of proposing twice. Steps, each recorded:

1. inspect: does the default branch carry ``.github/repairbot.yml``? Is there
   an onboarding pull request already (open or closed: a closed one is the
   maintainer's "no", and stands)? If not, the config to propose.
2. the trigger label, created when missing;
3. the commit adding the file, built deterministically and recorded, then
   pushed to ``repairbot/onboarding`` only if that branch does not exist;
4. the pull request (found by its marker first), taken out of draft: it is
   a proposal for the maintainer to merge, not agent code under review.
"""

from __future__ import annotations

from app.contracts import github, onboarding
from app.contracts.onboarding import ONBOARDING_WORKFLOW, OnboardRequest, OnboardResult
from app.engine import WorkflowContext, typed_workflow
from app.onboarding.proposal import ONBOARDING_BRANCH, TITLE, onboarding_op, pull_request_body
from app.repo_config import CONFIG_PATH
from app.workflows.calls import call


@typed_workflow(ONBOARDING_WORKFLOW, version=1)
async def onboard(ctx: WorkflowContext, request: OnboardRequest) -> OnboardResult:
    where = {"repo": request.repo, "installation_id": request.installation_id}
    seen = await call(
        ctx,
        onboarding.inspect_repository,
        onboarding.InspectInput(
            **where, repository_id=request.repository_id, trigger_label=request.trigger_label
        ),
        step="inspect",
    )
    if seen.state != "needs-config":
        return OnboardResult(outcome=seen.state, pull_number=seen.pull_number)
    await call(
        ctx,
        onboarding.ensure_label,
        onboarding.LabelInput(**where, name=request.trigger_label),
        step="label",
    )
    commit = github.CommitInput(
        **where,
        base_sha=seen.base_sha,
        patch_sha=seen.patch_sha,
        message=f"Add {CONFIG_PATH} (repairbot onboarding)",
        timestamp=ctx.now().isoformat(),
    )
    built = await call(ctx, github.build_intended_commit, commit, step="commit")
    await call(
        ctx,
        github.push_branch,
        github.PushInput(
            **commit.model_dump(), branch=ONBOARDING_BRANCH, sha=built.sha, expected=None
        ),
        step="push",
    )
    op = onboarding_op(request.repository_id)
    pull = await call(
        ctx,
        github.pull_request,
        github.PullRequestInput(
            **where,
            op_run=op.run,
            op_step=op.step,
            head=ONBOARDING_BRANCH,
            base=seen.default_branch,
            title=TITLE,
            body=pull_request_body(seen.config_text, seen.reasons, request.trigger_label),
        ),
        step="pull-request",
    )
    if pull.draft:
        await call(
            ctx,
            github.ready_for_review,
            github.ReadyInput(**where, number=pull.number),
            step="ready",
        )
    return OnboardResult(outcome="proposed", pull_number=pull.number)


WORKFLOWS = [onboard]
