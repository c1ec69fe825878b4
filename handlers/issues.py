"""``issues``: a label may start a repair; closing or unlabelling may cancel;
deleting or transferring the issue ends or moves its run.

Which label triggers a run is the repository's choice (``trigger_label`` in
``.github/repairbot.yml``), which a handler cannot read (no network here). So
a label added to an open issue starts a small ``label-triage`` workflow keyed
by the delivery, which reads the config through the contents API and starts
the run only for the trigger label: another label never creates a run (one
that would hold the issue and swallow the trigger's own delivery). Closing
starts a ``close-triage`` workflow: the closer's permission and whether the
close is GitHub's side effect of the run's merge are GitHub questions too.
"""

from __future__ import annotations

from app.contracts.ids import (
    CLOSE_TRIAGE_WORKFLOW,
    LABEL_TRIAGE_WORKFLOW,
    triage_workflow_id,
)
from app.contracts.requests import RunRequest
from app.contracts.triage_inputs import ISSUE_DELETED, CloseTriage, LabelTriage
from app.webhooks.events import IssuesEvent
from app.webhooks.routing import HandlerContext, Router
from handlers.inputs import issue_run, repair_request
from handlers.moves import move_run

router = Router()


def _request(event: IssuesEvent, ctx: HandlerContext) -> RunRequest:
    """The run request this event stands for (its sender asked)."""
    return repair_request(
        event,
        trigger="label",
        requested_by=event.sender.login,
        delivery_id=ctx.delivery_id,
        git_url=ctx.settings.github_git_url,
    )


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
    triage = LabelTriage(request=_request(event, ctx), default_trigger=ctx.settings.trigger_label)
    ctx.start(
        LABEL_TRIAGE_WORKFLOW, triage_workflow_id(ctx.delivery_id), triage.model_dump(mode="json")
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
    workflow_id = issue_run(ctx, event.repository, event.issue.number)
    if not _started_by_label(ctx, workflow_id, event.label.name):
        return
    ctx.cancel(workflow_id, f"the {event.label.name!r} label was removed by @{event.sender.login}")


@router.on("issues", "closed")
def closed(event: IssuesEvent, ctx: HandlerContext) -> None:
    if not ctx.settings.cancel_on_close:
        return
    if event.sender.login == ctx.bot_login:
        # Closed by repairbot's own merge (closing keywords): the run's own effect.
        ctx.notes.append("closed by repairbot itself: not a cancel")
        return
    if event.installation is None:
        ctx.notes.append("no installation in the payload: cannot act")
        return
    if ctx.tx.active_run(issue_run(ctx, event.repository, event.issue.number)) is None:
        ctx.notes.append("no active run for this issue")
        return
    triage = CloseTriage(request=_request(event, ctx), closer=event.sender.login)
    ctx.start(
        CLOSE_TRIAGE_WORKFLOW, triage_workflow_id(ctx.delivery_id), triage.model_dump(mode="json")
    )


@router.on("issues", "deleted")
def deleted(event: IssuesEvent, ctx: HandlerContext) -> None:
    """The issue is gone: its run is cancelled (it closes its pull request and
    deletes its branch, which are still there). The signal first, in the same
    transaction: the run's cleanup then knows its status comment went with the
    issue and reports the end on its check run only."""
    workflow_id = issue_run(ctx, event.repository, event.issue.number)
    ctx.signal(
        workflow_id,
        ISSUE_DELETED,
        {"by": event.sender.login},
        dedupe_key=f"issue-deleted:{ctx.delivery_id}",
    )
    ctx.cancel(workflow_id, f"the issue was deleted by @{event.sender.login}")


@router.on("issues", "transferred")
def transferred(event: IssuesEvent, ctx: HandlerContext) -> None:
    """The issue moved to another repository with a new number: its run is
    re-keyed there so later events (comments, a close, ``/repair status``)
    on the new issue reach it."""
    moved = event.changes_new_issue
    if moved is None:
        ctx.notes.append("transfer without its new issue: nothing to move")
        return
    move_run(
        ctx,
        issue_run(ctx, event.repository, event.issue.number),
        repository=moved.new_repository,
        issue_number=moved.new_issue.number,
    )
