"""``issues``: the trigger label starts a repair; closing or unlabelling cancels."""

from __future__ import annotations

from app.webhooks.events import IssuesEvent
from app.workflows.ids import REPAIR_WORKFLOW, repair_workflow_id
from handlers.inputs import repair_request
from handlers.router import HandlerContext, Router

router = Router()


@router.on("issues", "labeled")
def labeled(event: IssuesEvent, ctx: HandlerContext) -> None:
    assert event.label is not None
    if event.label.name != ctx.settings.trigger_label:
        ctx.notes.append(f"label {event.label.name!r} is not the trigger label")
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
        ),
    )


@router.on("issues", "unlabeled")
def unlabeled(event: IssuesEvent, ctx: HandlerContext) -> None:
    assert event.label is not None
    if event.label.name != ctx.settings.trigger_label or not ctx.settings.cancel_on_unlabel:
        return
    ctx.cancel(
        repair_workflow_id(event.repository.full_name, event.issue.number),
        f"the {event.label.name!r} label was removed by @{event.sender.login}",
    )


@router.on("issues", "closed")
def closed(event: IssuesEvent, ctx: HandlerContext) -> None:
    if not ctx.settings.cancel_on_close:
        return
    ctx.cancel(
        repair_workflow_id(event.repository.full_name, event.issue.number),
        f"the issue was closed by @{event.sender.login}",
    )
