"""The GitHub activities' contracts: every read and mutation the workflows
make on GitHub, by name, with their inputs, results and policies (the bodies
are activities/github.py's ``GitHubActivities``).

Each mutation is safe to retry: it finds its operation marker (or reads state
back) before acting; those declared ``reconciled`` answer, after a lost
response, whether the effect happened.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from app.contracts.requests import Review
from app.engine import RetryPolicy, Timeouts, activity_contract
from app.github.checks import Conclusion
from app.github.markers import OpId, strip_markers

API = RetryPolicy(initial_interval=1.0, backoff=2.0, max_interval=60.0, max_attempts=8)
API_TIMEOUTS = Timeouts(start_to_close=120, schedule_to_close=3600)
GIT_TIMEOUTS = Timeouts(start_to_close=600, schedule_to_close=3600)


# -- models ----------------------------------------------------------------------
# Inputs forbid unknown keys (a typo is a permanent error, not a silent default);
# results ignore unknown keys so an older workflow reads a newer result.


class RepoInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str
    installation_id: int


class Marked(RepoInput):
    """Inputs of mutations that leave an operation marker in what they write."""

    op_run: str
    op_step: str

    @property
    def op(self) -> OpId:
        return OpId(self.op_run, self.op_step)


class Result(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class PermissionInput(RepoInput):
    user: str


WRITE_OR_HIGHER: frozenset[str] = frozenset({"admin", "maintain", "write"})


class PermissionResult(Result):
    permission: str

    @property
    def may_write(self) -> bool:
        return self.permission in WRITE_OR_HIGHER


class BranchInput(RepoInput):
    branch: str


class BranchHeadResult(Result):
    sha: str


class PullInput(RepoInput):
    number: int


class CompareInput(RepoInput):
    base: str
    head: str


class CompareResult(Result):
    #: GitHub's ``identical``, ``ahead``, ``behind`` or ``diverged``; ``unrelated``
    #: when the two share no history (GitHub answers 404).
    status: str


class TreesInput(RepoInput):
    commits: list[str]


class TreesResult(Result):
    #: Each commit's tree, as GitHub reads it back.
    trees: dict[str, str]


class PolicyInput(BranchInput):
    #: Bound into the digest: a new build's policy is a new policy.
    policy_version: str


class PolicyResult(Result):
    #: ``<policy_version>+<git object id of the config at the branch's head>``.
    digest: str
    at: str


class IssueInput(RepoInput):
    number: int


class IssueView(Result):
    title: str
    body: str = ""
    author: str | None = None
    state: str = "open"


class PullView(Result):
    """A pull request as GitHub answered: opened (``github.pull_request``) or
    read (``github.read_pull``, the drift check). The one pull-request model
    that crosses from activities to workflows; each activity records every
    field, so the defaults only fill what one answer does not carry."""

    number: int
    url: str = ""
    #: ``open`` or ``closed`` (a merged pull request is closed and ``merged``).
    state: str = "open"
    merged: bool = False
    #: False when the repository cannot have drafts and a ready one was opened.
    draft: bool = True
    head_sha: str = ""
    merge_commit_sha: str | None = None
    #: ``github.pull_request`` created it (False: it existed).
    created: bool = False
    #: GitHub's global id (``None``: recorded before results carried it).
    node_id: str | None = None


class CommentInput(Marked):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("comment_id", "first_write")

    issue_number: int
    body: str
    #: The comment an earlier call for this operation returned: edited by id,
    #: without listing the issue's comments (made again if it was deleted).
    comment_id: int | None = None
    #: No earlier step wrote this operation's comment: on its task's first
    #: attempt the activity creates it without listing the issue's comments
    #: first (a later attempt lists them: its predecessor's create may have landed).
    first_write: bool = False


class CommentResult(Result):
    id: int
    url: str = ""
    created: bool = False


class CommitInput(RepoInput):
    base_sha: str
    patch_sha: str
    message: str
    timestamp: str


class CommitResult(Result):
    sha: str
    #: The commit's tree (``None``: built before results carried it).
    tree: str | None = None


class PushInput(CommitInput):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("head_repo",)

    branch: str
    sha: str
    #: Where the branch must be now; ``None``: it must not exist.
    expected: str | None = None
    #: The repository the branch lives in (the proposal fork); ``None``: ``repo``.
    head_repo: str | None = None


class PushResult(Result):
    status: str
    sha: str | None = None
    remote_sha: str | None = None


class DeleteBranchInput(BranchInput):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("head_repo",)

    #: Deleted only while the branch is still at this commit (ours).
    sha: str
    #: The repository the branch lives in (the proposal fork); ``None``: ``repo``.
    head_repo: str | None = None


class DeleteBranchResult(Result):
    deleted: bool
    reason: str | None = None


class PullRequestInput(Marked):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("head_owner",)

    head: str
    base: str
    title: str
    body: str
    #: ``head`` is a branch of this account's fork (``None``: of ``repo``).
    head_owner: str | None = None


class ReadyInput(PullInput):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("node_id",)

    #: The pull request's global id, from the read that just saw it a draft:
    #: the mutation is sent without reading it again.
    node_id: str | None = None


class ReadyResult(Result):
    changed: bool


class ClosePullInput(PullInput):
    #: A comment posted on the pull request before it is closed (found by marker).
    comment: str | None = None
    op_run: str | None = None
    op_step: str | None = None


class ClosePullResult(Result):
    closed: bool


class CheckRunInput(Marked):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("check_run_id", "first_write")

    head_sha: str
    name: str
    title: str
    summary: str
    #: ``None``: in progress.
    conclusion: Conclusion | None = None
    #: The check run an earlier call for this operation on ``head_sha``
    #: returned: updated by id, without listing the commit's check runs.
    check_run_id: int | None = None
    #: No earlier step wrote this operation's check run on ``head_sha``: on its
    #: task's first attempt the activity creates it without listing first.
    first_write: bool = False


class CheckRunResult(Result):
    id: int


class MergeInput(PullInput):
    sha: str
    method: Literal["merge", "squash", "rebase"]


class MergeResult(Result):
    #: ``merged``, ``head-moved`` or ``not-mergeable`` (others: a human decides).
    outcome: str
    merge_commit_sha: str | None = None
    head_sha: str | None = None
    reason: str | None = None


class RevertInput(Marked):
    """A draft pull request that reverts ``merge_sha`` (found by marker)."""

    merge_sha: str
    base: str
    branch: str
    title: str
    body: str
    timestamp: str


class RevertResult(Result):
    sha: str
    number: int
    url: str = ""


class ObserveInput(Marked):
    """What the drift check looks at: the run's issue, pull request and branch."""

    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("head_repo",)

    issue_number: int
    pull_number: int | None = None
    branch: str | None = None
    #: The repository the branch lives in (the proposal fork); ``None``: ``repo``.
    head_repo: str | None = None
    #: sha256 of the status comment's body as the run last wrote it (marker excluded).
    status_sha256: str | None = None


class ProposalRepoInput(RepoInput):
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("repo_id",)

    #: The repository's id from the event that started the run (runs are keyed
    #: by it): the parent a fork must name. ``None``: read by name from GitHub.
    repo_id: int | None = None


class ProposalRepoResult(Result):
    """Where the run's proposals go: ``repo`` (``owner/name``), or why nowhere."""

    repo: str | None = None
    refused: str | None = None


class ObserveResult(Result):
    issue_state: str = "open"
    pull: PullView | None = None
    #: Where the branch is (``None``: it does not exist).
    branch_sha: str | None = None
    #: ``ok``, ``missing`` (deleted by someone) or ``edited``.
    status_comment: Literal["ok", "missing", "edited", "unknown"] = "unknown"
    reviews: list[Review] = []


def body_sha256(body: str) -> str:
    """How the drift check compares the status comment with what the run wrote."""
    return hashlib.sha256(strip_markers(body).strip().encode()).hexdigest()


# -- activities ----------------------------------------------------------------

permission = activity_contract(
    "github.permission",
    PermissionInput,
    PermissionResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
branch_head = activity_contract(
    "github.branch_head",
    BranchInput,
    BranchHeadResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
compare = activity_contract(
    "github.compare",
    CompareInput,
    CompareResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
commit_trees = activity_contract(
    "github.commit_trees",
    TreesInput,
    TreesResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
read_issue = activity_contract(
    "github.read_issue",
    IssueInput,
    IssueView,
    retry=API,
    timeouts=API_TIMEOUTS,
)
policy_digest = activity_contract(
    "github.policy_digest",
    PolicyInput,
    PolicyResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
read_pull_request = activity_contract(
    "github.read_pull",
    PullInput,
    PullView,
    retry=API,
    timeouts=API_TIMEOUTS,
)
observe = activity_contract(
    "github.observe",
    ObserveInput,
    ObserveResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
comment = activity_contract(
    "github.comment",
    CommentInput,
    CommentResult,
    retry=API,
    timeouts=API_TIMEOUTS,
    reconciled=True,
)
build_intended_commit = activity_contract(
    "github.build_commit",
    CommitInput,
    CommitResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
push_branch = activity_contract(
    "github.push_branch",
    PushInput,
    PushResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
    reconciled=True,
)
delete_branch = activity_contract(
    "github.delete_branch",
    DeleteBranchInput,
    DeleteBranchResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
proposal_repo = activity_contract(
    "github.proposal_repo",
    ProposalRepoInput,
    ProposalRepoResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
pull_request = activity_contract(
    "github.pull_request",
    PullRequestInput,
    PullView,
    retry=API,
    timeouts=API_TIMEOUTS,
    reconciled=True,
)
propose_revert = activity_contract(
    "github.propose_revert",
    RevertInput,
    RevertResult,
    retry=API,
    timeouts=GIT_TIMEOUTS,
)
ready_for_review = activity_contract(
    "github.ready_for_review",
    ReadyInput,
    ReadyResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
close_pull = activity_contract(
    "github.close_pull",
    ClosePullInput,
    ClosePullResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
check_run = activity_contract(
    "github.check_run",
    CheckRunInput,
    CheckRunResult,
    retry=API,
    timeouts=API_TIMEOUTS,
)
merge = activity_contract(
    "github.merge",
    MergeInput,
    MergeResult,
    retry=API,
    timeouts=API_TIMEOUTS,
    reconciled=True,
)
