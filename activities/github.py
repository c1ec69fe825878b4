"""GitHub activities' bodies (their contracts: app/contracts/github.py): every
read and mutation the workflows make on GitHub.

Each mutation is safe to retry: it finds its operation marker (or reads state
back) before acting, and declares a reconcile function that answers, after a
lost response, whether the effect happened.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from githubkit.exception import GitHubException

from activities.suspension import suspension_checked
from app.config import Settings
from app.contracts import github
from app.contracts.github import (
    BranchHeadResult,
    BranchInput,
    CheckRunInput,
    CheckRunResult,
    ClosePullInput,
    ClosePullResult,
    CommentInput,
    CommentResult,
    CommitInput,
    CommitResult,
    CompareInput,
    CompareResult,
    DeleteBranchInput,
    DeleteBranchResult,
    IssueInput,
    IssueView,
    MergeInput,
    MergeResult,
    ObserveInput,
    ObserveResult,
    PermissionInput,
    PermissionResult,
    PolicyInput,
    PolicyResult,
    ProposalRepoInput,
    ProposalRepoResult,
    PullInput,
    PullRequestInput,
    PullView,
    PushInput,
    PushResult,
    ReadyInput,
    ReadyResult,
    RepoInput,
    RevertInput,
    RevertResult,
    TreesInput,
    TreesResult,
)
from app.contracts.requests import Review
from app.engine import (
    Absent,
    ActivityContext,
    Found,
    PermanentError,
    ReconcileResult,
    TransientError,
    Unknown,
    implements,
)
from app.evidence import EvidenceStore
from app.github.branches import Deletion, delete_branch_if_at
from app.github.checks import CheckRunView, ensure_check_run, update_check_run
from app.github.client import GitHubClientFactory, InstallationGitHub
from app.github.comments import ensure_comment, find_comments, rewrite_comment
from app.github.conditional import revalidating
from app.github.errors import classified, classify, status_of
from app.github.forks import Account, ForkRefused, ProposalAccounts, Ready, ensure_fork
from app.github.gitcmd import FetchOutcome, fetch_commit, git_env, init_bare, run_git
from app.github.markers import OpId
from app.github.merge import HeadMoved, Merged, merge_pinned, read_pull
from app.github.objcache import FetchAccess, ObjectCache, ObjectFetchError, borrow
from app.github.publish import (
    Built,
    Identity,
    Patch,
    PushStatus,
    Tree,
    publish_branch,
    remote_answers,
    remote_ref,
    write_commit,
)
from app.github.pulls import (
    PullSnapshot,
    ensure_pull_request,
    find_pull_requests,
    mark_ready_for_review,
)
from app.github.repos import RepoRef
from app.github.reviews import list_reviews

BOT = Identity("repairbot", "repairbot@users.noreply.github.com")


@dataclass(frozen=True)
class GitHubAccess:
    """What GitHub activities share in a worker: the client factory and git's URL."""

    factory: GitHubClientFactory
    git_url: str
    #: The worker process's git object cache (``None``: every step fetches).
    objects: ObjectCache | None = None
    #: The proposal account's installation, kept a minute (read by every run).
    accounts: ProposalAccounts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accounts", ProposalAccounts(self.factory))

    def clone_url(self, repo: str) -> str:
        return f"{self.git_url.rstrip('/')}/{repo}.git"


def _factory_of(activities: GitHubActivities) -> GitHubClientFactory:
    return activities.access.factory


#: For activities that run git: its bare 401/403 may be a suspended installation.
_git_suspension = suspension_checked(_factory_of)


# -- reads --------------------------------------------------------------------


CONFIG_PATH = ".github/repairbot.yml"


def _pull_view(pull: PullSnapshot) -> PullView:
    """app/github's pull request as the workflows see it."""
    return PullView(
        number=pull.number,
        url=pull.html_url,
        state=pull.state,
        merged=pull.merged,
        draft=pull.draft,
        head_sha=pull.head_sha,
        merge_commit_sha=pull.merge_commit_sha,
        created=pull.created,
        node_id=pull.node_id,
    )


# -- comments -----------------------------------------------------------------


# -- branches -----------------------------------------------------------------


#: What each git step may do with the repository it works on (and nothing else).
_READ = {"contents": "read"}
_WRITE = {"contents": "write"}


async def _git_token(
    access: GitHubAccess, installation_id: int, repo: str, permissions: dict[str, str]
) -> str | None:
    """A token for the run's one repository with ``permissions`` only."""
    return (await _fetch_access(access, installation_id, repo, permissions)).token


async def _fetch_access(
    access: GitHubAccess, installation_id: int, repo: str, permissions: dict[str, str]
) -> FetchAccess:
    """:func:`_git_token`, with the cache key of the repository it was minted for."""
    token = await access.factory.installation_token(
        installation_id, repository=repo, permissions=permissions
    )
    return FetchAccess.minted(installation_id, token)


async def _branch_home(
    access: GitHubAccess, request: RepoInput, head_repo: str | None, permissions: dict[str, str]
) -> tuple[str, str | None]:
    """The repository the run's branch lives in and a token for it: the base
    repository's installation, or the proposal account's for its fork."""
    if head_repo is None or head_repo == request.repo:
        return request.repo, await _git_token(
            access, request.installation_id, request.repo, permissions
        )
    async with access.accounts.using(RepoRef.parse(head_repo).owner) as account:
        return head_repo, await _git_token(access, account.installation_id, head_repo, permissions)


@contextlib.asynccontextmanager
async def _base_objects(
    access: GitHubAccess,
    repo: str,
    base_sha: str,
    fetch: FetchAccess,
    into: Path,
    *,
    whole: bool = False,
) -> AsyncIterator[Path]:
    """A bare repository of ours in ``into`` holding ``base_sha``, with its
    whole history if ``whole``, else the commit alone: borrowing the worker's
    cache entry for it (fetched once per worker process) or, without a cache,
    fetched fresh. Write into it freely: the entry is never written."""
    bare = into / "objects.git"
    init_bare(bare)
    url = access.clone_url(repo)
    if access.objects is None or fetch.key is None:
        fetched = await fetch_commit(bare, url, base_sha, token=fetch.token, whole=whole)
        _raise_unless_fetched(fetched, repo, base_sha)
        yield bare
        return
    async with contextlib.AsyncExitStack() as held:
        try:
            entry = await held.enter_async_context(
                access.objects.lease(
                    fetch.key, base_sha, remote_url=url, token=fetch.token, whole=whole
                )
            )
        except ObjectFetchError as exc:
            _raise_unless_fetched(exc.outcome, repo, base_sha)
            raise
        borrow(bare, entry)
        yield bare


def _raise_unless_fetched(fetched: FetchOutcome, repo: str, sha: str) -> None:
    if fetched.status == "unreachable":
        raise TransientError(f"cannot fetch {sha} from {repo}: {fetched.detail}")
    if fetched.status == "missing":
        raise PermanentError(f"cannot fetch {sha} from {repo}: {fetched.detail}")


# -- where proposals live -------------------------------------------------------

#: The status comment's words when no proposal owner is configured.
NO_PROPOSAL_OWNER = (
    "repairbot did not publish this fix: nothing the agent wrote goes to a branch of "
    "{repo}, where GitHub would run its workflows with the repository's secrets "
    "before anyone reviewed it. The operator sets `REPAIRBOT_PROPOSAL_OWNER` to an "
    "organization where the App is installed on all repositories (proposals are then "
    "pushed to its fork of {repo}), or accepts the risk with "
    "`REPAIRBOT_PROPOSALS_IN_BASE_REPOSITORY=true`; then this run can be resumed."
)


PROPOSAL_FORK_REFUSED = (
    "repairbot did not publish this fix: its proposal fork cannot be used: {why}. "
    "Once that is fixed, this run can be resumed."
)


# -- pull requests, checks, merge ----------------------------------------------


class GitHubActivities:
    """The GitHub activities' bodies, with what they need given here: the
    client factory and git's URL, the evidence store (patches to commit) and
    the settings (where proposals go)."""

    def __init__(self, access: GitHubAccess, evidence: EvidenceStore, settings: Settings) -> None:
        self.access = access
        self.evidence = evidence
        self.settings = settings

    def _client(self, request: RepoInput) -> tuple[InstallationGitHub, RepoRef]:
        """The installation's client, scoped to the request's repository, and that repository."""
        gh = self.access.factory.for_installation(request.installation_id, repository=request.repo)
        return gh, RepoRef.parse(request.repo)

    @implements(github.permission)
    async def permission(self, actx: ActivityContext, request: PermissionInput) -> PermissionResult:
        """A user's permission on the repository (admin, write, read or none), from the API."""
        gh, repo = self._client(request)
        try:
            response = await gh.rest.repos.async_get_collaborator_permission_level(
                repo.owner, repo.name, request.user
            )
        except GitHubException as exc:
            if status_of(exc) == 404:
                return PermissionResult(permission="none")
            raise classify(exc, mutation=False) from exc
        return PermissionResult(permission=response.parsed_data.permission)

    @implements(github.branch_head)
    async def branch_head(self, actx: ActivityContext, request: BranchInput) -> BranchHeadResult:
        """The commit a branch points at now."""
        gh, repo = self._client(request)
        with classified(mutation=False):
            response = await gh.rest.git.async_get_ref(
                repo.owner, repo.name, f"heads/{request.branch}"
            )
        return BranchHeadResult(sha=response.parsed_data.object_.sha)

    @implements(github.compare)
    async def compare(self, actx: ActivityContext, request: CompareInput) -> CompareResult:
        """How ``head`` relates to ``base`` (``ahead``: a fast-forward of it)."""
        gh, repo = self._client(request)
        try:
            response = await gh.rest.repos.async_compare_commits(
                repo.owner, repo.name, f"{request.base}...{request.head}"
            )
        except GitHubException as exc:
            if status_of(exc) == 404:
                return CompareResult(status="unrelated")
            raise classify(exc, mutation=False) from exc
        return CompareResult(status=response.parsed_data.status)

    @implements(github.commit_trees)
    async def commit_trees(self, actx: ActivityContext, request: TreesInput) -> TreesResult:
        """The tree of each commit, read back from GitHub (what landed, what was verified)."""
        gh, repo = self._client(request)
        trees: dict[str, str] = {}
        for sha in dict.fromkeys(request.commits):
            with classified(mutation=False):
                response = await gh.rest.git.async_get_commit(repo.owner, repo.name, sha)
            trees[sha] = response.parsed_data.tree.sha
        return TreesResult(trees=trees)

    @implements(github.read_issue)
    async def read_issue(self, actx: ActivityContext, request: IssueInput) -> IssueView:
        """The issue as it is now: title, body, author, state."""
        gh, repo = self._client(request)
        with classified(mutation=False):
            issue = (
                await gh.rest.issues.async_get(repo.owner, repo.name, request.number)
            ).parsed_data
        return IssueView(
            title=issue.title,
            body=issue.body or "",
            author=issue.user.login if issue.user else None,
            state=issue.state,
        )

    @implements(github.policy_digest)
    @_git_suspension
    async def policy_digest(self, actx: ActivityContext, request: PolicyInput) -> PolicyResult:
        """The policy in force now: the build's policy version and the repository's
        config as it is at the branch's head (read from git, not from the run)."""
        access = self.access
        gh, repo = self._client(request)
        with classified(mutation=False):
            ref = await gh.rest.git.async_get_ref(repo.owner, repo.name, f"heads/{request.branch}")
        head = ref.parsed_data.object_.sha
        fetch = await _fetch_access(access, request.installation_id, request.repo, _READ)
        with tempfile.TemporaryDirectory(prefix="repairbot-policy-") as tmp:
            async with _base_objects(access, request.repo, head, fetch, Path(tmp)) as bare:
                # The config's git object id names its content: nothing of the
                # (repository-controlled, maybe huge) file is read into memory.
                found = await run_git(
                    ["rev-parse", "--verify", "--quiet", f"{head}:{CONFIG_PATH}"],
                    cwd=bare,
                    env=git_env(extra={"GIT_DIR": str(bare)}),
                )
        config = found.stdout.strip() if found.ok else "none"
        return PolicyResult(digest=f"{request.policy_version}+{config}", at=head)

    @implements(github.read_pull_request)
    async def read_pull_request(self, actx: ActivityContext, request: PullInput) -> PullView:
        gh, repo = self._client(request)
        state = await read_pull(gh, repo, request.number)
        return _pull_view(state)

    @implements(github.observe)
    @_git_suspension
    async def observe(self, actx: ActivityContext, request: ObserveInput) -> ObserveResult:
        """The drift check's read: what humans may have changed while the run waited.

        Its REST reads repeat every check while nothing changes: revalidated, an
        unchanged answer costs the installation's rate limit nothing."""
        with revalidating():
            return await self._observe(actx, request)

    async def _observe(self, actx: ActivityContext, request: ObserveInput) -> ObserveResult:
        access = self.access
        gh, repo = self._client(request)
        with classified(mutation=False):
            issue = (
                await gh.rest.issues.async_get(repo.owner, repo.name, request.issue_number)
            ).parsed_data
        pull: PullView | None = None
        reviews: list[Review] = []
        if request.pull_number is not None:
            pull = _pull_view(await read_pull(gh, repo, request.pull_number))
            for review in await list_reviews(gh, repo, request.pull_number):
                if review.user is None or not review.commit_id:
                    continue
                reviews.append(
                    Review(
                        review_id=review.id,
                        state=review.state.lower(),
                        commit_id=review.commit_id,
                        reviewer=review.user.login,
                        body=review.body or "",
                        submitted_at=review.submitted_at.isoformat()
                        if review.submitted_at
                        else None,
                    )
                )
        branch_sha: str | None = None
        if request.branch is not None:
            where, token = await _branch_home(access, request, request.head_repo, _READ)
            branch_sha = await remote_ref(access.clone_url(where), request.branch, token=token)
        status: Literal["ok", "missing", "edited", "unknown"] = "unknown"
        if request.status_sha256 is not None:
            found = await find_comments(
                gh,
                repo,
                request.issue_number,
                OpId(request.op_run, request.op_step),
                bot_login=await access.factory.bot_login(),
            )
            if not found:
                status = "missing"
            elif github.body_sha256(found[0].body or "") != request.status_sha256:
                status = "edited"
            else:
                status = "ok"
        return ObserveResult(
            issue_state=issue.state,
            pull=pull,
            branch_sha=branch_sha,
            status_comment=status,
            reviews=reviews,
        )

    async def _comment_exists(
        self, actx: ActivityContext, request: CommentInput
    ) -> ReconcileResult:
        access = self.access
        gh = access.factory.for_installation(request.installation_id, repository=request.repo)
        found = await find_comments(
            gh,
            RepoRef.parse(request.repo),
            request.issue_number,
            request.op,
            bot_login=await access.factory.bot_login(),
        )
        if not found:
            return Absent()
        return Found(CommentResult(id=found[0].id, url=found[0].html_url, created=True))

    @implements(github.comment, reconcile=_comment_exists)
    async def comment(self, actx: ActivityContext, request: CommentInput) -> CommentResult:
        """Exactly one comment for the operation, created or updated in place."""
        access = self.access
        gh = access.factory.for_installation(request.installation_id, repository=request.repo)
        repo, bot_login = RepoRef.parse(request.repo), await access.factory.bot_login()
        if request.comment_id is not None:
            result = await rewrite_comment(
                gh,
                repo,
                request.comment_id,
                request.issue_number,
                request.op,
                request.body,
                bot_login=bot_login,
            )
        else:
            result = await ensure_comment(
                gh,
                repo,
                request.issue_number,
                request.op,
                request.body,
                bot_login=bot_login,
                # Attempt 1 is the task's first claim: no create of it can have landed.
                unwritten=request.first_write and actx.attempt == 1,
            )
        return CommentResult(id=result.id, url=result.html_url, created=result.created)

    @contextlib.asynccontextmanager
    async def _intended_commit(
        self,
        actx: ActivityContext,
        request: CommitInput,
        workdir: Path,
        *,
        push: bool = False,
        whole: bool = False,
    ) -> AsyncIterator[tuple[Path, Built, str | None]]:
        """Build the commit in a fresh bare repository (``push``: with a token that
        may push to the base; ``whole``: holding the base's whole history)."""
        access = self.access
        fetch = await _fetch_access(
            access, request.installation_id, request.repo, _WRITE if push else _READ
        )
        async with _base_objects(
            access, request.repo, request.base_sha, fetch, workdir, whole=whole
        ) as bare:
            patch = self.evidence.get(request.patch_sha)
            built = await write_commit(
                bare,
                request.base_sha,
                Patch(patch),
                request.message,
                BOT,
                datetime.fromisoformat(request.timestamp),
            )
            yield bare, built, fetch.token

    @implements(github.build_intended_commit)
    @_git_suspension
    async def build_intended_commit(
        self, actx: ActivityContext, request: CommitInput
    ) -> CommitResult:
        """The commit we mean to publish, built deterministically; recorded before any
        push, with its tree (what the confirmation compares the merge commit's with)."""
        with tempfile.TemporaryDirectory(prefix="repairbot-commit-") as tmp:
            async with self._intended_commit(actx, request, Path(tmp)) as (_, built, _):
                pass
        return CommitResult(sha=built.sha, tree=built.tree)

    async def _branch_state(self, actx: ActivityContext, request: PushInput) -> ReconcileResult:
        access = self.access
        where, token = await _branch_home(access, request, request.head_repo, _READ)
        at = await remote_ref(access.clone_url(where), request.branch, token=token)
        if at == request.sha:
            return Found(PushResult(status="already-there", sha=at, remote_sha=at))
        if at == (request.expected or None):
            return Absent()
        return Unknown(
            f"branch {request.branch} is at {at or 'nothing'}; we expected "
            f"{request.expected or 'no branch'} or our commit {request.sha}"
        )

    @implements(github.push_branch, reconcile=_branch_state)
    @_git_suspension
    async def push_branch(self, actx: ActivityContext, request: PushInput) -> PushResult:
        """Conditionally move the branch from ``expected`` (None: must not exist) to ``sha``."""
        with tempfile.TemporaryDirectory(prefix="repairbot-push-") as tmp:
            in_base = request.head_repo in (None, request.repo)
            # The fork may not have the base's newer commits (the base moved
            # since it was made): a push sends what it lacks, so the history
            # the commit stands on must be here whole, not shallow (fetched
            # whole at once: a shallow fetch deepened after cost a second one).
            async with self._intended_commit(
                actx, request, Path(tmp), push=in_base, whole=not in_base
            ) as (bare, built, token):
                sha = built.sha
                if sha != request.sha:
                    raise PermanentError(
                        f"rebuilt commit {sha} differs from the recorded {request.sha}"
                    )
                where, token = (
                    (request.repo, token)
                    if in_base
                    else await _branch_home(self.access, request, request.head_repo, _WRITE)
                )
                outcome = await publish_branch(
                    bare,
                    self.access.clone_url(where),
                    request.branch,
                    sha,
                    expected=request.expected or None,
                    token=token,
                )
        return PushResult(
            status=outcome.status.value, sha=outcome.sha, remote_sha=outcome.remote_sha
        )

    @implements(github.delete_branch)
    @_git_suspension
    async def delete_branch(
        self, actx: ActivityContext, request: DeleteBranchInput
    ) -> DeleteBranchResult:
        """Delete our branch only if it is still at the commit we put there (``sha``).

        Usable after a merge and after cancellation. ``deleted`` is True also when
        the branch was already gone; a branch somebody moved is left alone with a
        ``reason``.
        """
        access = self.access
        where, token = await _branch_home(access, request, request.head_repo, _WRITE)
        outcome = await delete_branch_if_at(
            access.clone_url(where), request.branch, request.sha, token=token
        )
        reason = None
        if outcome.status is Deletion.MOVED:
            reason = f"somebody moved {request.branch} to {outcome.remote_sha}"
        return DeleteBranchResult(deleted=outcome.deleted, reason=reason)

    @implements(github.proposal_repo)
    async def proposal_repo(
        self, actx: ActivityContext, request: ProposalRepoInput
    ) -> ProposalRepoResult:
        """Where the run's proposals are pushed: the proposal account's fork of the
        repository (made on first use), the repository itself only if the operator
        opted in, or nowhere (``refused`` says why and what to do)."""
        settings = self.settings
        if not settings.proposal_owner:
            if settings.proposals_in_base_repository:
                return ProposalRepoResult(repo=request.repo)
            refused = NO_PROPOSAL_OWNER.format(repo=request.repo)
            return ProposalRepoResult(refused=refused)
        try:
            fork = await self._proposal_fork(actx, request, settings.proposal_owner)
        except ForkRefused as refused:
            # Only a human can fix this (install the App, grant a permission,
            # rename a repository): the run parks and says so, resumable.
            return ProposalRepoResult(refused=PROPOSAL_FORK_REFUSED.format(why=refused))
        return ProposalRepoResult(repo=fork.full_name)

    async def _proposal_fork(
        self, actx: ActivityContext, request: ProposalRepoInput, owner: str
    ) -> RepoRef:
        access = self.access
        async with access.accounts.using(owner) as account:
            return await ensure_fork(
                access.factory,
                access.factory.for_installation(request.installation_id, repository=request.repo),
                RepoRef.parse(request.repo),
                account,
                ready=self._fork_ready(account),
                parent_id=request.repo_id,
            )

    def _fork_ready(self, account: Account) -> Ready:
        access = self.access

        async def ready(fork: RepoRef) -> bool:
            """git answers for the fork: GitHub finished copying it."""
            try:
                token = await _git_token(access, account.installation_id, fork.full_name, _READ)
            except PermanentError:
                return False  # GitHub mints no token for a repository it is still creating
            return await remote_answers(access.clone_url(fork.full_name), token=token)

        return ready

    async def _pull_exists(
        self, actx: ActivityContext, request: PullRequestInput
    ) -> ReconcileResult:
        access = self.access
        found = await find_pull_requests(
            access.factory.for_installation(request.installation_id, repository=request.repo),
            RepoRef.parse(request.repo),
            request.head,
            request.op,
            bot_login=await access.factory.bot_login(),
            head_owner=request.head_owner,
        )
        if not found:
            return Absent()
        pr = found[0]
        # The same shape as the activity's own result: the workflow cannot tell them apart.
        return Found(
            PullView(
                number=pr.number,
                url=pr.html_url,
                head_sha=pr.head.sha,
                state=pr.state,
                merged=pr.merged_at is not None,
                created=True,
                draft=bool(pr.draft),
            )
        )

    @implements(github.pull_request, reconcile=_pull_exists)
    async def pull_request(self, actx: ActivityContext, request: PullRequestInput) -> PullView:
        """The draft pull request for the run's branch, with the evidence in its body.

        ``draft`` in the result is False where the repository's plan has no drafts
        (GitHub's 422): the pull request is open for review, and merging still
        waits for an approving review.
        """
        access = self.access
        result = await ensure_pull_request(
            access.factory.for_installation(request.installation_id, repository=request.repo),
            RepoRef.parse(request.repo),
            head=request.head,
            base=request.base,
            title=request.title,
            body=request.body,
            op=request.op,
            bot_login=await access.factory.bot_login(),
            head_owner=request.head_owner,
        )
        return _pull_view(result)

    @implements(github.propose_revert)
    @_git_suspension
    async def propose_revert(self, actx: ActivityContext, request: RevertInput) -> RevertResult:
        """A revert of the merge commit, proposed for a human to approve: a commit on
        ``merge_sha`` with its first parent's tree (built deterministically), pushed to
        a branch that must not exist (or already holds it), and a draft pull request.
        Safe to retry: the same inputs give the same commit, the push is conditional
        and the pull request is found by its marker."""
        access = self.access
        gh, repo = self._client(request)
        with classified(mutation=False):
            merged = await gh.rest.git.async_get_commit(repo.owner, repo.name, request.merge_sha)
        if not merged.parsed_data.parents:
            raise PermanentError(f"{request.merge_sha} has no parent to revert to")
        parent = merged.parsed_data.parents[0].sha
        with classified(mutation=False):
            before = (await gh.rest.git.async_get_commit(repo.owner, repo.name, parent)).parsed_data
        fetch = await _fetch_access(access, request.installation_id, request.repo, _WRITE)
        token = fetch.token
        with tempfile.TemporaryDirectory(prefix="repairbot-revert-") as tmp:
            async with _base_objects(
                access, request.repo, request.merge_sha, fetch, Path(tmp)
            ) as bare:
                fetched = await fetch_commit(
                    bare, access.clone_url(request.repo), parent, token=token
                )
                if fetched.status != "fetched":
                    raise TransientError(f"cannot fetch {parent}: {fetched.detail}")
                reverting = await write_commit(
                    bare,
                    request.merge_sha,
                    Tree(before.tree.sha),
                    request.title,
                    BOT,
                    datetime.fromisoformat(request.timestamp),
                )
                sha = reverting.sha
                pushed = await publish_branch(
                    bare,
                    access.clone_url(request.repo),
                    request.branch,
                    sha,
                    expected=None,
                    token=token,
                )
        if pushed.status == PushStatus.LEASE_REFUSED and pushed.remote_sha != sha:
            raise PermanentError(
                f"branch {request.branch} exists (at {pushed.remote_sha}) and is not this revert"
            )
        result = await ensure_pull_request(
            gh,
            repo,
            head=request.branch,
            base=request.base,
            title=request.title,
            body=request.body,
            op=request.op,
            bot_login=await access.factory.bot_login(),
        )
        return RevertResult(sha=sha, number=result.number, url=result.html_url)

    @implements(github.ready_for_review)
    async def ready_for_review(self, actx: ActivityContext, request: ReadyInput) -> ReadyResult:
        """Take the approved draft out of draft so it can be merged (idempotent)."""
        gh, repo = self._client(request)
        changed = await mark_ready_for_review(gh, repo, request.number, node_id=request.node_id)
        return ReadyResult(changed=changed)

    @implements(github.close_pull)
    async def close_pull(self, actx: ActivityContext, request: ClosePullInput) -> ClosePullResult:
        """Say why on the pull request (once, by marker), then close it (idempotent)."""
        access = self.access
        gh, repo = self._client(request)
        if request.comment and request.op_run and request.op_step:
            await ensure_comment(
                gh,
                repo,
                request.number,
                OpId(request.op_run, request.op_step),
                request.comment,
                bot_login=await access.factory.bot_login(),
            )
        with classified(mutation=True):
            await gh.rest.pulls.async_update(repo.owner, repo.name, request.number, state="closed")
        return ClosePullResult(closed=True)

    @implements(github.check_run)
    async def check_run(self, actx: ActivityContext, request: CheckRunInput) -> CheckRunResult:
        """The run's check on its proposed commit (found by operation id, updated in
        place; by its id alone when an earlier call returned it)."""
        gh, repo = self._client(request)
        view = CheckRunView(
            name=request.name,
            title=request.title,
            summary=request.summary,
            conclusion=request.conclusion,
        )
        if request.check_run_id is not None:
            result = await update_check_run(
                gh, repo, request.check_run_id, request.head_sha, request.op, view
            )
        else:
            result = await ensure_check_run(
                gh,
                repo,
                request.head_sha,
                request.op,
                view,
                # Attempt 1 is the task's first claim: no create of it can have landed.
                unwritten=request.first_write and actx.attempt == 1,
            )
        return CheckRunResult(id=result.id)

    async def _merged_already(self, actx: ActivityContext, request: MergeInput) -> ReconcileResult:
        gh, repo = self._client(request)
        state = await read_pull(gh, repo, request.number)
        if state.merged:
            return Found(MergeResult(outcome="merged", merge_commit_sha=state.merge_commit_sha))
        return Absent()

    @implements(github.merge, reconcile=_merged_already)
    async def merge(self, actx: ActivityContext, request: MergeInput) -> MergeResult:
        """Merge only if the head is still the approved commit (``sha``-pinned)."""
        gh, repo = self._client(request)
        outcome = await merge_pinned(gh, repo, request.number, request.sha, request.method)
        if isinstance(outcome, Merged):
            result = MergeResult(outcome="merged", merge_commit_sha=outcome.merge_commit_sha)
        elif isinstance(outcome, HeadMoved):
            result = MergeResult(outcome="head-moved", head_sha=outcome.head_sha)
        else:
            result = MergeResult(outcome="not-mergeable", reason=outcome.reason)
        return result
