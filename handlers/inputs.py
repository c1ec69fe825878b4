"""The work a run is asked to do, as handlers know it from the event."""

from __future__ import annotations

from app.contracts.ids import repair_workflow_ids
from app.contracts.requests import RunRequest
from app.webhooks.events import IssueCommentEvent, IssuesEvent
from app.webhooks.models import Repository
from app.webhooks.routing import HandlerContext


def issue_run(ctx: HandlerContext, repository: Repository, issue_number: int) -> str:
    """The workflow id that holds the issue's run: the repository-id key, or
    the legacy name key while a run started before the 0009 migration is
    still active under it. A run under the name key that recorded a
    repository id (the older of two the migration found on one key) belongs
    to that id only: a different repository that took the name reaches nothing."""
    key, legacy = repair_workflow_ids(repository.id, repository.full_name, issue_number)
    if ctx.tx.active_run(key) is not None:
        return key
    old = ctx.tx.active_run(legacy)
    if old is not None and recorded_repository_id(old.input) in (None, repository.id):
        return legacy
    return key


def recorded_repository_id(run_input: object) -> int | None:
    """The repository id a run's input recorded (None in runs of older builds)."""
    value = run_input.get("repo_id") if isinstance(run_input, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def clone_url(git_url: str, full_name: str) -> str:
    return f"{git_url.rstrip('/')}/{full_name}.git"


def repair_request(
    event: IssuesEvent | IssueCommentEvent,
    *,
    trigger: str,
    requested_by: str,
    delivery_id: str,
    git_url: str,
) -> RunRequest:
    """The repair run's input. The base commit and budgets are resolved and
    fixed by the run itself, at its start (the work contract)."""
    assert event.installation is not None
    repo = event.repository
    label = event.label.name if isinstance(event, IssuesEvent) and event.label else None
    return RunRequest(
        repo=repo.full_name,
        repo_id=repo.id,
        owner=repo.owner.login,
        name=repo.name,
        default_branch=repo.default_branch,
        clone_url=clone_url(git_url, repo.full_name),
        installation_id=event.installation.id,
        issue_number=event.issue.number,
        issue_title=event.issue.title,
        issue_body=event.issue.body,
        issue_author=event.issue.user.login if event.issue.user else None,
        trigger="label" if trigger == "label" else "comment",
        requested_by=requested_by,
        label=label,
        sender_is_bot=event.sender.is_bot if trigger == "label" else False,
        delivery_id=delivery_id,
    )
