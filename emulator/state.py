"""The emulator's world: users, apps, installations, repositories and their objects.

Everything lives in memory except git data, which lives in bare repositories on
disk (see ``emulator.git``). One re-entrant lock guards the whole world: REST
handlers, the control API and git push callbacks each take it for the duration
of one request, so every request sees and leaves a consistent state, as GitHub's
per-request atomicity promises.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

Role = Literal["read", "triage", "write", "maintain", "admin"]
ROLE_RANK: dict[str, int] = {
    "none": 0,
    "read": 1,
    "triage": 2,
    "write": 3,
    "maintain": 4,
    "admin": 5,
}
#: Installation permission levels, ordered.
LEVEL_RANK: dict[str, int] = {"none": 0, "read": 1, "write": 2, "admin": 3}

DEFAULT_APP_PERMISSIONS: dict[str, str] = {
    "metadata": "read",
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "checks": "write",
}
DEFAULT_APP_EVENTS: list[str] = [
    "check_run",
    "issue_comment",
    "issues",
    "pull_request",
    "pull_request_review",
    "push",
    "repository",
]


class Clock:
    """Wall clock plus an offset the control API can advance (to expire tokens)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def now(self) -> datetime:
        return (datetime.now(UTC) + self.offset).replace(microsecond=0)


@dataclass
class User:
    id: int
    login: str
    type: Literal["User", "Organization", "Bot"] = "User"
    name: str | None = None
    email: str | None = None
    site_admin: bool = False
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: User
    public_key: RSAPublicKey
    permissions: dict[str, str]
    events: list[str]
    webhook_url: str | None
    webhook_secret: str | None
    created_at: datetime
    description: str = ""
    client_id: str = ""
    #: The user authorization's secret (sign-in with GitHub through the App).
    client_secret: str = ""
    #: Where the user authorization may send people back to (empty: anywhere).
    callback_urls: list[str] = field(default_factory=list)
    url: str = ""


@dataclass
class Installation:
    id: int
    app_id: int
    account: User
    #: None means "all repositories of the account".
    repo_ids: set[int] | None
    permissions: dict[str, str]
    events: list[str]
    created_at: datetime
    updated_at: datetime
    suspended_at: datetime | None = None
    #: Who suspended it (GitHub shows the account in ``suspended_by``).
    suspended_by: User | None = None

    @property
    def repository_selection(self) -> str:
        return "all" if self.repo_ids is None else "selected"


@dataclass
class Token:
    value: str
    kind: Literal["installation", "user"]
    expires_at: datetime | None
    installation_id: int | None = None
    user_login: str | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    #: Installation tokens may be narrowed to some repositories; None = the installation's.
    repo_ids: set[int] | None = None
    #: User tokens from an App's user authorization name that App.
    app_id: int | None = None


@dataclass
class Grant:
    """A one-time code: an OAuth authorization (``kind`` "oauth", for ``user``
    and ``app_id``) or an App manifest awaiting conversion ("manifest")."""

    code: str
    kind: Literal["oauth", "manifest"]
    expires_at: datetime
    app_id: int
    user_login: str = ""
    redirect_uri: str = ""
    private_key_pem: str = ""


@dataclass
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None
    default: bool = False


@dataclass
class Issue:
    id: int
    number: int
    title: str
    body: str | None
    user: User
    created_at: datetime
    updated_at: datetime
    state: Literal["open", "closed"] = "open"
    state_reason: str | None = None
    closed_at: datetime | None = None
    closed_by: User | None = None
    labels: list[str] = field(default_factory=list)
    locked: bool = False
    #: Set when the issue is the conversation of a pull request.
    pull: PullRequest | None = None
    performed_via_app: int | None = None


@dataclass
class PullRequest:
    id: int
    issue: Issue
    head_ref: str
    base_ref: str
    draft: bool
    #: Last head sha seen in git; what the PR shows once its branch is gone.
    head_sha: str
    base_sha: str
    merged: bool = False
    merged_at: datetime | None = None
    merged_by: User | None = None
    merge_commit_sha: str | None = None
    maintainer_can_modify: bool = False
    #: The fork the head branch lives in (``None``: the base repository itself).
    head_repo: Repo | None = None
    #: (base_sha, head_sha) pairs a merge attempt found conflicting (a rebase
    #: can conflict where the three-way merge git's ``mergeable`` checks does
    #: not): unmergeable from then on. git's own verdict is remembered by the
    #: repository's commit-keyed history.
    merge_refused: set[tuple[str, str]] = field(default_factory=set)
    #: Reads left that answer ``mergeable: null`` (scripted: GitHub computing).
    mergeable_unknown_reads: int = 0

    @property
    def number(self) -> int:
        return self.issue.number


@dataclass
class Comment:
    id: int
    issue_number: int
    user: User
    body: str
    created_at: datetime
    updated_at: datetime
    performed_via_app: int | None = None


@dataclass
class Review:
    id: int
    pull_number: int
    user: User
    body: str
    state: str
    commit_id: str
    submitted_at: datetime


@dataclass
class CheckRun:
    id: int
    suite_id: int
    app_id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    started_at: datetime | None
    completed_at: datetime | None
    details_url: str | None
    external_id: str | None
    output: dict[str, Any]


@dataclass
class Repo:
    id: int
    owner: User
    name: str
    path: Path
    default_branch: str
    private: bool
    created_at: datetime
    updated_at: datetime
    pushed_at: datetime
    description: str | None = None
    collaborators: dict[str, str] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    comments: dict[int, Comment] = field(default_factory=dict)
    reviews: dict[int, Review] = field(default_factory=dict)
    check_runs: dict[int, CheckRun] = field(default_factory=dict)
    next_number: int = 1
    #: False on a private repository whose plan has no draft pull requests.
    drafts_supported: bool = True
    #: Issues transferred away: old number -> (repository id, new number).
    transferred_issues: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: For a fork: the repository it was forked from, and the root of the network.
    parent: Repo | None = None
    source: Repo | None = None
    #: Forks made of this repository (GitHub's ``forks_count``).
    forks_count: int = 0
    #: A fork still being created: this many more requests naming it answer
    #: 404 before it exists (GitHub forks asynchronously).
    pending_requests: int = 0
    #: What git said about its commits (see :class:`emulator.git.BareRepo`).
    git_history: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    @property
    def fork(self) -> bool:
        return self.parent is not None

    @property
    def network_root(self) -> Repo:
        return self.source or self

    def pulls(self) -> list[PullRequest]:
        return [i.pull for i in self.issues.values() if i.pull is not None]

    def role_of(self, login: str) -> str:
        if login.lower() == self.owner.login.lower():
            return "admin"
        return self.collaborators.get(login.lower(), "none")


class Store:
    """All emulator state, guarded by ``lock``; ids are unique per kind."""

    def __init__(self, *, root: Path, token_ttl: timedelta = timedelta(hours=1)) -> None:
        self.root = root
        self.lock = threading.RLock()
        self.clock = Clock()
        self.token_ttl = token_ttl
        self.users: dict[str, User] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.repos: dict[str, Repo] = {}
        #: Former full names (lowercased) of renamed or transferred repositories -> id.
        self.moved: dict[str, int] = {}
        self.grants: dict[str, Grant] = {}
        #: Requests a new fork answers 404 before it exists (control API).
        self.fork_pending_requests = 1
        # Distinct ranges per kind make a wrong id fail loudly instead of hitting
        # another object by coincidence.
        self._ids: dict[str, itertools.count[int]] = {}
        self._bases = {
            "user": 1001,
            "app": 101,
            "installation": 5001,
            "repo": 200_001,
            "label": 300_001,
            "issue": 400_001,
            "pull": 500_001,
            "comment": 600_001,
            "review": 700_001,
            "check_run": 800_001,
            "check_suite": 900_001,
        }

    def next_id(self, kind: str) -> int:
        if kind not in self._ids:
            self._ids[kind] = itertools.count(self._bases.get(kind, 1))
        return next(self._ids[kind])

    def now(self) -> datetime:
        return self.clock.now()

    # -- users and tokens ------------------------------------------------------

    def user(self, login: str) -> User | None:
        return self.users.get(login.lower())

    def add_user(self, login: str, **kwargs: Any) -> User:
        user = User(id=self.next_id("user"), login=login, **kwargs)
        self.users[login.lower()] = user
        return user

    def mint_token(self, token: Token) -> Token:
        self.tokens[token.value] = token
        return token

    def new_token_value(self, prefix: str) -> str:
        return prefix + secrets.token_hex(18)

    # -- repositories ----------------------------------------------------------

    def repo(self, owner: str, name: str) -> Repo | None:
        return self.repos.get(f"{owner}/{name}".lower())

    def arriving(self, repo: Repo) -> bool:
        """Whether ``repo`` is a fork still being created; each call counts as one
        request that found it missing."""
        if repo.pending_requests <= 0:
            return False
        repo.pending_requests -= 1
        return True

    def fork_of(self, source: Repo, account: User) -> Repo | None:
        """``account``'s fork of ``source``, if it has one."""
        for repo in self.repos.values():
            if repo.parent is source and repo.owner.id == account.id:
                return repo
        return None

    def network_fork(self, repo: Repo, owner: str) -> Repo | None:
        """The repository of ``owner`` in ``repo``'s fork network (a head for its PRs)."""
        root = repo.network_root
        for candidate in self.repos.values():
            if candidate.owner.login.lower() == owner.lower() and candidate.network_root is root:
                return candidate
        return None

    def installations_for(self, repo: Repo) -> list[Installation]:
        """Installations whose repository set includes ``repo``."""
        found = []
        for inst in self.installations.values():
            if inst.account.id != repo.owner.id or inst.suspended_at is not None:
                continue
            if inst.repo_ids is None or repo.id in inst.repo_ids:
                found.append(inst)
        return found
