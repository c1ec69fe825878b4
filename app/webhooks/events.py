"""Parse a webhook delivery into a small typed event, keyed by (event, action).

Parsing is lenient on purpose: a payload parses when the fields repairbot
uses are present, whatever else it lacks. githubkit's strict webhook models
reject real deliveries that predate newer schema fields (``label.archived_at``,
``installation.app_slug``, ...), so they cannot be the gate. A payload that
lacks a field we need raises :class:`PayloadError` naming that field; an event
we do not handle becomes :class:`UnknownEvent` (answer 202, ignore it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ValidationError, model_validator

from app.webhooks.models import (
    Account,
    CheckRun,
    Comment,
    InstallationRef,
    InstalledAccount,
    Issue,
    Label,
    Model,
    PullRequest,
    Repository,
    RepositoryRef,
    RequestedAction,
    Review,
)

#: How handlers route: the ``X-GitHub-Event`` name and the payload's ``action``
#: (``None`` for events without one, such as ``push`` and ``ping``).
RoutingKey = tuple[str, str | None]


class PayloadError(ValueError):
    """The payload is not JSON, not an object, or lacks a field repairbot needs."""

    def __init__(self, event: str, problems: list[str], *, field: str | None = None) -> None:
        self.event = event
        #: Dotted path of the first offending field (``"issue.number"``), if any.
        self.field = field
        self.problems = problems
        super().__init__(f"malformed {event!r} payload: " + "; ".join(problems))


class WebhookEvent(Model):
    """Fields every event we handle shares. Subclasses name their event."""

    name: ClassVar[str]

    action: str | None = None
    sender: Account
    repository: Repository | None = None
    #: Present in deliveries to a GitHub App; absent in repository webhooks.
    installation: InstallationRef | None = None

    @property
    def key(self) -> RoutingKey:
        return (self.name, self.action)


class _ActionEvent(WebhookEvent):
    action: str


class _RepositoryEvent(_ActionEvent):
    repository: Repository


class IssueTransfer(Model):
    """``changes`` of ``issues.transferred``: where the issue lives now."""

    new_issue: Issue
    new_repository: Repository


class IssuesEvent(_RepositoryEvent):
    name = "issues"
    issue: Issue
    #: The label added or removed (``labeled`` / ``unlabeled`` only).
    label: Label | None = None
    #: For ``transferred``: the new issue and repository.
    changes: IssueTransfer | None = None

    @property
    def changes_new_issue(self) -> IssueTransfer | None:
        return self.changes if self.action == "transferred" else None

    @model_validator(mode="after")
    def _label_for_label_actions(self) -> IssuesEvent:
        if self.action in ("labeled", "unlabeled") and self.label is None:
            raise ValueError(f"label is required for action {self.action!r}")
        return self


class IssueCommentEvent(_RepositoryEvent):
    name = "issue_comment"
    issue: Issue
    comment: Comment


class PullRequestEvent(_RepositoryEvent):
    name = "pull_request"
    number: int
    pull_request: PullRequest


class PullRequestReviewEvent(_RepositoryEvent):
    name = "pull_request_review"
    pull_request: PullRequest
    review: Review


class CheckRunEvent(_RepositoryEvent):
    name = "check_run"
    check_run: CheckRun
    #: Set for ``requested_action`` (a button on our check run was pressed).
    requested_action: RequestedAction | None = None


class InstallationEvent(_ActionEvent):
    name = "installation"
    installation: InstalledAccount
    #: Repositories granted at install time (absent when "all repositories").
    repositories: tuple[RepositoryRef, ...] = ()


class InstallationRepositoriesEvent(_ActionEvent):
    name = "installation_repositories"
    installation: InstalledAccount
    repositories_added: tuple[RepositoryRef, ...] = ()
    repositories_removed: tuple[RepositoryRef, ...] = ()


class RepositoryEvent(_RepositoryEvent):
    """``repository``: renamed, transferred, deleted, ... The payload's
    ``repository`` is the repository as it is now (new name, new owner);
    its ``id`` never changes."""

    name = "repository"


class PushEvent(WebhookEvent):
    name = "push"
    repository: Repository
    ref: str
    before: str
    after: str
    created: bool = False
    deleted: bool = False
    forced: bool = False


class PingEvent(WebhookEvent):
    name = "ping"
    hook_id: int
    zen: str = ""


class UnknownEvent(Model):
    """An event repairbot does not handle: acknowledged and ignored."""

    event: str
    action: str | None = None

    @property
    def key(self) -> RoutingKey:
        return (self.event, self.action)


ParsedEvent = (
    IssuesEvent
    | IssueCommentEvent
    | PullRequestEvent
    | PullRequestReviewEvent
    | CheckRunEvent
    | InstallationEvent
    | InstallationRepositoriesEvent
    | RepositoryEvent
    | PushEvent
    | PingEvent
)

EVENT_TYPES: Mapping[str, type[ParsedEvent]] = {
    cls.name: cls
    for cls in (
        IssuesEvent,
        IssueCommentEvent,
        PullRequestEvent,
        PullRequestReviewEvent,
        CheckRunEvent,
        InstallationEvent,
        InstallationRepositoriesEvent,
        RepositoryEvent,
        PushEvent,
        PingEvent,
    )
}


def _problems(exc: ValidationError) -> tuple[str | None, list[str]]:
    problems: list[str] = []
    first: str | None = None
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in error["loc"])
        if first is None and path:
            first = path
        kind: str = error["type"]
        if kind == "missing":
            problems.append(f"{path} is missing")
        else:
            msg = error["msg"].removeprefix("Value error, ")
            problems.append(f"{path}: {msg}" if path else msg)
    return first, problems


def load_payload(event: str, body: bytes | str) -> dict[str, Any]:
    """Decode the raw body into a JSON object or raise :class:`PayloadError`."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(event, [f"body is not JSON: {exc}"]) from exc
    if not isinstance(payload, dict):
        raise PayloadError(event, [f"body is a JSON {type(payload).__name__}, not an object"])
    return payload


def parse_event(event: str, body: bytes | str | Mapping[str, Any]) -> ParsedEvent | UnknownEvent:
    """Parse one delivery. ``event`` is the ``X-GitHub-Event`` header value."""
    cls = EVENT_TYPES.get(event)
    if cls is not None and not isinstance(body, Mapping):
        # The common case in one step: pydantic reads the raw JSON itself
        # (a third of the time of ``json.loads`` and then validating the
        # objects it made). Anything it refuses goes the long way below, so
        # a payload that fails is told so in the same words either way.
        try:
            return cls.model_validate_json(body)
        except ValidationError:
            pass
    payload = dict(body) if isinstance(body, Mapping) else load_payload(event, body)
    if cls is None:
        action = payload.get("action")
        return UnknownEvent(event=event, action=action if isinstance(action, str) else None)
    try:
        return cls.model_validate(payload)
    except ValidationError as exc:
        field, problems = _problems(exc)
        raise PayloadError(event, problems, field=field) from None


__all__ = [
    "EVENT_TYPES",
    "CheckRunEvent",
    "InstallationEvent",
    "InstallationRepositoriesEvent",
    "IssueCommentEvent",
    "IssuesEvent",
    "ParsedEvent",
    "PayloadError",
    "PingEvent",
    "PullRequestEvent",
    "PullRequestReviewEvent",
    "PushEvent",
    "RepositoryEvent",
    "RoutingKey",
    "UnknownEvent",
    "WebhookEvent",
    "load_payload",
    "parse_event",
]
