"""``issues``: a label may start a repair; closing or unlabelling cancels.

Which label triggers a run is the repository's choice (``trigger_label`` in
``.github/repairbot.yml``), which a handler cannot read (no network here). So
any label added to an open issue starts a run, and the run's first steps
decide: the sender's permission (through the API), then the repository's
trigger label and bot allow-list; a run that was not really asked for ends
quietly, without a comment.
"""

from __future__ import annotations

from app.webhooks.events import IssuesEvent
from app.webhooks.routing import HandlerContext, Router
from app.workflows.contracts import RunRequest
from app.workflows.ids import REPAIR_WORKFLOW, repair_workflow_id
from handlers.inputs import repair_request

router = Router()


@router.on("issues", "labeled")
def labeled(event: IssuesEvent, ctx: HandlerContext) -> None:
    assert event.label is not None
    if event.sender.login == ctx.bot_login:
        ctx.notes.append("label added by repairbot itself: ignored")
        return
    if event.issue.is_pull_request or event.issue.state != "open":
        ctx.notes.append("labelled item is a pull request or a closed issue: ignored")
        return
    if event.installation is None:
        ctx.notes.append("no installation in the payload: cannot act")
        return
    ctx.start(
        REPAIR_WORKFLOW,
        repair_workflow_id(event.repository.full_name, event.issue.number),
        repair_request(
            event,
            trigger="label",
            requested_by=event.sender.login,
            delivery_id=ctx.delivery_id,
            git_url=ctx.settings.github_git_url,
        ).model_dump(mode="json"),
    )


def _started_by_label(ctx: HandlerContext, workflow_id: str, label: str) -> bool:
    """Whether removing ``label`` takes away what started the issue's active run."""
    run = ctx.tx.active_run(workflow_id)
    if run is None:
        return False
    request = RunRequest.model_validate(run.input) if isinstance(run.input, dict) else None
    if request is not None and request.trigger == "label" and request.label is not None:
        return request.label == label
    return label == ctx.settings.trigger_label


@router.on("issues", "unlabeled")
def unlabeled(event: IssuesEvent, ctx: HandlerContext) -> None:
    assert event.label is not None
    if not ctx.settings.cancel_on_unlabel:
        return
    workflow_id = repair_workflow_id(event.repository.full_name, event.issue.number)
    if not _started_by_label(ctx, workflow_id, event.label.name):
        return
    ctx.cancel(workflow_id, f"the {event.label.name!r} label was removed by @{event.sender.login}")


@router.on("issues", "closed")
def closed(event: IssuesEvent, ctx: HandlerContext) -> None:
    if not ctx.settings.cancel_on_close:
        return
    ctx.cancel(
        repair_workflow_id(event.repository.full_name, event.issue.number),
        f"the issue was closed by @{event.sender.login}",
    )
