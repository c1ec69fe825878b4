"""The parts of webhook payloads repairbot reads, and nothing else.

GitHub's payloads grow fields over time and old deliveries lack fields the
newest schema calls required, so these models ignore what they do not name
and require only what the app uses. Strings that GitHub sends as ``null``
when empty (bodies, external ids) become ``""`` so callers never branch on
``None`` for text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _empty_if_none(value: Any) -> Any:
    return "" if value is None else value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


#: Text that may arrive as ``null``.
Text = Annotated[str, BeforeValidator(_empty_if_none)]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Account(Model):
    """A user, bot or organization (``sender``, ``user``, ``owner``, ``account``)."""

    login: str
    id: int
    #: "User", "Bot" or "Organization".
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot"


class Repository(Model):
    id: int
    name: str
    full_name: str
    owner: Account
    default_branch: str


class RepositoryRef(Model):
    """A repository as installation events list it (no owner, no default branch)."""

    id: int
    name: str
    full_name: str


class InstallationRef(Model):
    """The installation an event names (the stored record is ``app.app_tables.Installation``)."""

    id: int
    #: Present in installation events; other events carry only the id.
    account: Account | None = None


class InstalledAccount(InstallationRef):
    account: Account


class Label(Model):
    name: str


class _PullRequestLink(Model):
    """Presence of ``issue.pull_request`` marks an issue that is a pull request."""

    url: str | None = None


class Issue(Model):
    number: int
    title: str
    body: Text = ""
    #: "open" or "closed".
    state: str
    labels: tuple[Label, ...] = ()
    user: Account | None = None
    pull_request: _PullRequestLink | None = None

    @property
    def is_pull_request(self) -> bool:
        return self.pull_request is not None

    @property
    def label_names(self) -> frozenset[str]:
        return frozenset(label.name for label in self.labels)


class Comment(Model):
    id: int
    body: Text = ""
    user: Account


class Branch(Model):
    """``pull_request.head`` or ``.base``: a branch name and the commit it pointed at."""

    ref: str
    sha: str
    #: The repository the branch lives in; ``None`` when it was deleted (a
    #: fork removed). A fork's pull request has a head repository other than
    #: the base's: it never steers a run.
    repo: RepositoryRef | None = None


class PullRequest(Model):
    number: int
    #: "open" or "closed".
    state: str
    #: Absent in review events; ``None`` means "not stated", not "not merged".
    merged: bool | None = None
    merge_commit_sha: str | None = None
    draft: bool | None = None
    head: Branch
    base: Branch
    user: Account
    body: Text = ""

    @property
    def from_fork(self) -> bool:
        """The head branch is not in the base repository (or is gone)."""
        head, base = self.head.repo, self.base.repo
        return head is None or base is None or head.id != base.id

    def from_run_branch_home(self, proposal_owner: str) -> bool:
        """The head branch is where repairbot keeps its branches: the base
        repository, or a fork owned by the proposal account (nobody else can
        create repositories there; a stranger's fork can name its branch
        ``repairbot/issue-1`` too)."""
        if not self.from_fork:
            return True
        head = self.head.repo
        owner = head.full_name.partition("/")[0] if head is not None else ""
        return bool(proposal_owner) and owner.lower() == proposal_owner.lower()


class Review(Model):
    id: int
    #: Lowercased: "approved", "changes_requested", "commented" or "dismissed"
    #: (the REST API says "APPROVED"; webhooks say "approved").
    state: Annotated[str, BeforeValidator(_lower)]
    commit_id: str
    user: Account
    body: Text = ""
    submitted_at: datetime | None = None


class CheckRun(Model):
    id: int
    name: str
    head_sha: str
    #: repairbot stores the operation id here; other apps often leave it empty.
    external_id: Text = ""
    status: str
    conclusion: str | None = None


class RequestedAction(Model):
    identifier: str
