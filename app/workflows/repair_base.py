"""What every phase of the repair run shares: the request, the typed state,
the repository's config once read, and the calls that report progress.

Deterministic code only: effects are activities, time is ``ctx.now()``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict, TypeVar, cast

from pydantic import BaseModel

from app.contracts import github
from app.contracts.agent import FeedbackInput
from app.contracts.repo_commands import VerifyInput, VerifyResult
from app.contracts.requests import RunRequest
from app.contracts.triage_inputs import REPOSITORY_MOVED, RepositoryMovedSignal
from app.contracts.workspace import WorkspaceSpec
from app.engine import ActivityError, TypedActivity, WorkflowContext, WorkflowFuture
from app.evidence import EvidenceRef
from app.github.checks import Conclusion
from app.repo_config import CheckoutConfig, Command, RepoConfig
from app.workflows.calls import again, call, first, schedule, unsuspended, waits_out
from app.workflows.report import check_conclusion, check_summary, check_title, status_comment
from app.workflows.state import Next, Outcome, Phase, RunState

I = TypeVar("I", bound=BaseModel)  # noqa: E741 (an activity's input model)
R = TypeVar("R", bound=BaseModel)

POLICY_VERSION = "2026-11-30.2"
CHECK_NAME = "repairbot"


class RepoFields(TypedDict):
    """Where a GitHub activity acts: the fields every repository input shares."""

    repo: str
    installation_id: int


class Finished(Exception):
    """Ends the run with an outcome; the phase loop turns it into the final report."""

    def __init__(
        self,
        outcome: Outcome,
        detail: str = "",
        *,
        next_steps: str | None = None,
        resume_at: Next | None = None,
    ):
        super().__init__(outcome)
        self.outcome: Outcome = outcome
        self.detail = detail
        self.next_steps = next_steps
        #: For ``needs-human``: the phase an operator's ``repairbot runs resume``
        #: continues from, once they fixed the cause (None: the run just ends).
        self.resume_at = resume_at


class RunBase:
    def __init__(self, ctx: WorkflowContext, request: RunRequest) -> None:
        self.ctx = ctx
        self.request = request
        self.state = RunState(
            run_id=ctx.run_id,
            policy_version=POLICY_VERSION,
            repo=request.repo,
            issue_number=request.issue_number,
            base_branch=request.default_branch,
        )
        self.config = RepoConfig()
        #: Where the repository is now, after a rename or transfer (None: unmoved).
        self.moved: RepositoryMovedSignal | None = None
        #: Where an operator's resume continues a run parked as needs-human.
        self.resume_at: Next | None = None
        self.reproduction: list[Command] = []
        self.reproduction_log: EvidenceRef | None = None
        self.feedback: list[FeedbackInput] = []
        self.patch: EvidenceRef | None = None
        #: The base commit an approval is taken to cover.
        self.reviewed_base: str | None = None
        #: The final detail of a merged run (None: the plain "Merged ...").
        self.merged_detail: str | None = None
        #: The durable timer that ends the working time budget (per work round).
        self.deadline: WorkflowFuture | None = None
        self.round_started: datetime | None = None
        self.status_written = 0
        #: The status comment's id, once a write returned it.
        self.status_comment_id: int | None = None
        #: Whether this run edits its status comment by id (None: not asked
        #: yet; runs recorded before that list the issue's comments each time).
        self.status_by_id: bool | None = None
        #: sha256 of the status comment's body as last written (drift check).
        self.status_sha: str | None = None
        self.publications = 0
        #: Commits with a check run of ours still in progress.
        self.checks_open: list[str] = []
        #: The tree of each commit the run built (``github.build_commit``
        #: results that carry it): a commit's sha names its tree.
        self.built_trees: dict[str, str] = {}
        #: Our check run's id on each commit, once a write returned it.
        self.check_run_ids: dict[str, int] = {}
        #: Commits a check-run write of this run was scheduled for.
        self.checks_written: set[str] = set()
        #: Whether this run leaves out the GitHub reads of what it knows (None:
        #: not asked yet): see :meth:`skips_known_reads`.
        self.known_reads_skipped: bool | None = None
        #: Publication effects whose result the run has not taken in yet.
        self.inflight: dict[str, WorkflowFuture] = {}
        ctx.set_query("status", lambda: self.state.summary().model_dump(mode="json"))

    # -- inputs of activities ---------------------------------------------------

    def follow_moves(self) -> None:
        """Take in the renames and transfers of the repository that arrived
        (``repository_moved`` signals, buffered: no await, so every phase sees
        them before its next GitHub call). The run is keyed by repository id;
        its calls and clones use the name GitHub gives the repository now."""
        while self.ctx.pending_signals(REPOSITORY_MOVED) and self.ctx.patched(
            "events-repository-moved"
        ):
            signal = self.ctx.wait_signal(REPOSITORY_MOVED).result  # buffered: resolved
            self.moved = RepositoryMovedSignal.model_validate(signal.payload)
            self.state.repo = self.moved.full_name

    def repo_fields(self) -> RepoFields:
        self.follow_moves()
        repo = self.moved.full_name if self.moved else self.request.repo
        return RepoFields(repo=repo, installation_id=self.request.installation_id)

    def spec(self, base_sha: str, patch: EvidenceRef | None = None) -> WorkspaceSpec:
        self.follow_moves()
        return WorkspaceSpec(
            repo=self.moved.full_name if self.moved else self.request.repo,
            clone_url=self.moved.clone_url if self.moved else self.request.clone_url,
            base_sha=base_sha,
            installation_id=self.request.installation_id,
            patch=patch,
            # The default (the commit alone) is left out: specs stay as recorded.
            checkout=None if self.config.checkout == CheckoutConfig() else self.config.checkout,
        )

    def verify_input(self, base_sha: str, patch: EvidenceRef | None) -> VerifyInput:
        """What verifying ``patch`` on ``base_sha`` runs: setup, the reproduction, the tests."""
        return VerifyInput(
            workspace=self.spec(base_sha, patch),
            setup=self.config.setup,
            setup_network=self.config.network == "setup",
            reproduction=self.reproduction,
            test=self.config.test,
            time_limit_seconds=self.config.budgets.time_limit_seconds,
        )

    def keep_tree(self, built: github.CommitResult) -> None:
        """What the confirmation compares the merge commit's tree with."""
        if built.tree is not None:
            self.built_trees[built.sha] = built.tree

    def keep_verification(self, verdict: VerifyResult, what: str) -> None:
        """A verification's logs as evidence items ("reproduction with <what>", ...)."""
        if verdict.reproduction is not None:
            self.state.add_evidence(f"reproduction with {what}", verdict.reproduction.log)
        if verdict.tests is not None:
            self.state.add_evidence(f"tests with {what}", verdict.tests.log)

    # -- progress ----------------------------------------------------------------

    def skips_known_reads(self) -> bool:
        """Whether this run leaves out the GitHub reads of what it already knows:
        the first status write and the first check run on a commit are made
        without listing first, a check run is updated by its id, the fork's
        parent is the run's repository id, the draft is marked ready by the
        node the revalidating read named, the verified tree is the one its
        build returned. One patch for all of them, asked where the first is
        needed (one history event a run): runs recorded before this change
        made those reads, and replay with them."""
        if self.known_reads_skipped is None:
            self.known_reads_skipped = self.ctx.patched("skip-reads-the-run-knows")
        return self.known_reads_skipped

    async def report(self, phase: Phase | None = None, detail: str | None = None) -> None:
        """Rewrite the status comment (found by its marker, updated in place)."""
        if phase is not None:
            self.state.phase = phase
        if detail is not None:
            self.state.detail = detail
        self.status_written += 1
        body = status_comment(self.state)
        if self.status_comment_id is not None and self.status_by_id is None:
            self.status_by_id = self.ctx.patched("status-comment-by-id")
        # The run's first status write: no step before it wrote the comment, so
        # its first attempt creates it without listing the issue's comments.
        first = self.status_written == 1 and self.skips_known_reads()
        written = await call(
            self.ctx,
            github.comment,
            github.CommentInput(
                **self.repo_fields(),
                issue_number=self.request.issue_number,
                op_run=self.ctx.run_id,
                op_step="status",
                body=body,
                comment_id=self.status_comment_id if self.status_by_id else None,
                first_write=first,
            ),
            step=f"status-{self.status_written}",
        )
        self.status_comment_id = written.id
        self.status_sha = github.body_sha256(body)

    async def check(self, sha: str, *, final: bool, step: str) -> None:
        """Our check run on ``sha``: in progress while a review is awaited, completed
        with the run's conclusion at its end."""
        await self.write_check(
            sha,
            title=check_title(self.state),
            summary=check_summary(self.state),
            conclusion=check_conclusion(self.state) if final else None,
            step=step,
        )

    async def check_superseded(self, sha: str, n: int | str, summary: str = "") -> None:
        """Complete our check run on a commit a newer proposal replaced."""
        await self.write_check(
            sha,
            title="Superseded by a newer proposal",
            summary=summary or f"Replaced by the commit of publication {n}.",
            conclusion="neutral",
            step=f"check-superseded-{n}",
        )

    async def write_check(
        self, sha: str, *, title: str, summary: str, conclusion: Conclusion | None, step: str
    ) -> None:
        """Create or update our check run on ``sha`` (found by its marker, or
        named by the id an earlier write on ``sha`` returned)."""
        known = self.check_run_ids.get(sha)
        if known is not None and not self.skips_known_reads():
            known = None  # runs recorded before this change listed them again
        # No step before this one wrote our check run on ``sha``: its first
        # attempt creates it without listing the commit's check runs.
        first = sha not in self.checks_written and self.skips_known_reads()
        self.checks_written.add(sha)
        written = await call(
            self.ctx,
            github.check_run,
            github.CheckRunInput(
                **self.repo_fields(),
                head_sha=sha,
                op_run=self.ctx.run_id,
                op_step="check",
                name=CHECK_NAME,
                title=title,
                summary=summary,
                conclusion=conclusion,
                check_run_id=known,
                first_write=first,
            ),
            step=step,
        )
        self.check_run_ids[sha] = written.id

    # -- the working time budget --------------------------------------------------

    def start_work_round(self) -> None:
        """Arm the durable timer for what is left of the working time budget."""
        self.round_started = self.ctx.now()
        left = max(1.0, self.state.limits.total_seconds - self.state.usage.work_seconds)
        self.deadline = self.ctx.sleep(left)

    def end_work_round(self) -> None:
        if self.round_started is not None:
            spent = (self.ctx.now() - self.round_started).total_seconds()
            self.state.usage.work_seconds += spent
            self.round_started = None

    async def within_budget(self, future: WorkflowFuture) -> Any:
        """The activity's result, unless the working time budget ends first."""
        if self.deadline is None:
            return await future
        if await first(future, self.deadline) == 1 and not future.done:
            self.end_work_round()
            if self.ctx.patched("deadline-stops-activity"):
                # Stop the agent or command in flight and wait until it has
                # (sandbox killed, workspace removed): runs recorded before
                # this change left it running and ignored its result.
                await self.ctx.cancel_activity(future)
            raise Finished(
                "time-budget-exhausted",
                f"The working time budget ({self.state.limits.total_seconds:.0f}s) ran out "
                "in the middle of an attempt.",
            )
        return await future

    async def timed(self, defn: TypedActivity[I, R], input: I, *, step: str) -> R:
        """A working-phase activity call, bounded by the working time budget."""
        return await self.working(defn, input, step=step)

    async def working(
        self,
        defn: TypedActivity[I, R],
        input: I,
        *,
        step: str,
        inflight: str | None = None,
        budgeted: bool = True,
    ) -> R:
        """An activity call of the run's work: bounded by the working time
        budget (unless not ``budgeted``), kept in ``inflight`` under that name
        for a cancel to settle. A suspended installation parks the run until
        the unsuspend (the wait is not work time), then it calls again."""
        waits = 0
        while True:
            future = schedule(self.ctx, defn, input, step=again(step, waits))
            if inflight is not None:
                self.inflight[inflight] = future
            try:
                raw = await (self.within_budget(future) if budgeted else future)
            except ActivityError as error:
                if not waits_out(self.ctx, error):
                    raise
            else:
                return cast(R, defn.result_type.model_validate(raw))
            waits += 1
            in_round = self.round_started is not None
            self.end_work_round()
            await unsuspended(self.ctx)
            if in_round:
                self.start_work_round()

    def expires(self, submitted_at: datetime) -> datetime:
        return submitted_at + timedelta(hours=self.state.limits.approval_ttl_hours)
