"""The repair workflow, version 2: a labelled issue becomes a reproduced bug,
a verified fix, a draft pull request with evidence, a human approval of the
exact commit, and a sha-pinned merge.

A phase loop over a typed state (:class:`RunState`): each phase returns the
next one; changes requested go back to ``repairing``, a renewed review back
to ``awaiting-review``. One place, :meth:`Repair.conclude`, turns every ending
(a finished outcome, an activity error that escaped its retries, a spent
budget) into the final status comment and a completed check run that say
what happened, the pull request's true state, and what to do next.
Cancellation, at any await of any phase, goes to :meth:`Repair.cancel`.

Runs started on version 1 keep replaying :mod:`app.workflows.repair_v1`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.contracts import github
from app.contracts.requests import RunRequest
from app.contracts.triage_inputs import ISSUE_DELETED
from app.engine import (
    ActivityError,
    CleanupIncomplete,
    NeedsHuman,
    WorkflowCancelled,
    WorkflowContext,
    WorkflowFuture,
    typed_workflow,
)
from app.workflows import repair_v1
from app.workflows.calls import call
from app.workflows.installation_slots import InstallationSlot
from app.workflows.repair_base import Finished
from app.workflows.repair_review import ReviewPhases
from app.workflows.repair_work import WorkPhases
from app.workflows.state import Next, RunSummary
from app.workflows.trigger_check import bot_may_trigger

#: Outcomes that park the run (it holds the issue until a human retries it).
PARKING = frozenset({"needs-human"})
RESUME_STEPS = (
    "Fix the cause, then resume this run (`repairbot runs resume <run> --reason ...`, "
    "or Resume on its dashboard page); or comment `/repair retry` to start over."
)


class Repair(WorkPhases, ReviewPhases):
    slot: InstallationSlot | None = None

    def phases(self) -> dict[Next, Callable[[], Awaitable[Next]]]:
        return {
            "reproducing": self.reproduce,
            "repairing": self.repair,
            "publishing": self.publish,
            "awaiting-review": self.await_review,
            "merging": self.merge,
            "confirming": self.confirm,
        }

    async def run(self) -> RunSummary:
        try:
            if self.ctx.patched("verified-every-end-reported"):
                # The start's own endings (an invalid config, no reproduction, a
                # permanent error in the trigger check) are reported like any
                # other; runs recorded before this change failed silently here.
                quiet = await self.ended(self.start)
                if quiet is not None:
                    return self.quiet(quiet)
                if self.state.outcome is None:
                    await self.loop()
            else:
                if not await self.sender_may_trigger():
                    return self.quiet("the label's sender does not have write access")
                if not await self.prepare():
                    return self.quiet("the label is not this repository's trigger (or its sender)")
                await self.loop()
            await self.conclude()
            while self.resumable():
                await self.resume_after_operator()
        except WorkflowCancelled as cancelled:
            await self.cancel(cancelled.reason)
        if self.state.outcome in PARKING:
            raise NeedsHuman(self.state.detail or "a human needs to decide")
        return self.result()

    def quiet(self, why: str) -> RunSummary:
        """End without a word on the issue: the run was never really asked for."""
        self.state.outcome = "not-triggered"
        self.state.detail = why
        return self.result()

    def resumable(self) -> bool:
        return self.state.outcome in PARKING and self.resume_at is not None

    async def resume_after_operator(self) -> None:
        """Park (holding no worker) until an operator resumes the run with
        ``repairbot runs resume``, then go on from the phase that stopped."""
        assert self.resume_at is not None
        signal = await self.ctx.wait_for_operator(self.state.detail or "a human needs to decide")
        payload = signal.payload if isinstance(signal.payload, dict) else {}
        start, self.resume_at = self.resume_at, None
        self.state.outcome = None
        self.state.next_steps = None
        by = payload.get("by") or "an operator"
        await self.report(detail=f"Resumed by {by}: {payload.get('reason') or 'no reason given'}.")
        await self.loop(start)
        await self.conclude()

    async def start(self) -> str | None:
        """Who asked and the work contract. A reason when the run was never
        really asked for (it ends without a word)."""
        if self.request.reread_issue and self.ctx.patched("verified-retry-reads-issue"):
            await self.reread_issue()
        if not await self.sender_may_trigger():
            return "the label's sender does not have write access"
        # Runs recorded before this change read the allow-list from their clone.
        checked_early = self.request.sender_is_bot and self.ctx.patched("bot-label-before-clone")
        if checked_early and not await bot_may_trigger(self):
            return "the label's bot is not on the repository's allow-list"
        if not await self.prepare():
            return "the label is not this repository's trigger (or its sender)"
        return None

    async def reread_issue(self) -> None:
        """A retry works on the issue as it reads now, not as the first run saw it."""
        issue = await call(
            self.ctx,
            github.read_issue,
            github.IssueInput(**self.repo_fields(), number=self.request.issue_number),
            step="issue-now",
        )
        self.request = self.request.model_copy(
            update={
                "issue_title": issue.title,
                "issue_body": issue.body,
                "issue_author": issue.author,
            }
        )

    async def ended(self, step: Callable[[], Awaitable[str | None]]) -> str | None:
        """Run ``step``; an ending it raises becomes the run's outcome (reported
        by :meth:`conclude`), never an uncaught failure."""
        try:
            return await step()
        except Finished as finished:
            self.finished(finished)
        except ActivityError as error:
            self.failed(error)
        self.end_work_round()
        return None

    async def loop(self, start: Next = "reproducing") -> None:
        """Run phases until one ends the run; record how it ended."""
        phases = self.phases()
        following: Next = start
        # Runs recorded before per-installation caps never asked for a slot.
        slot = self.installation_slot() if self.ctx.patched("installation-caps") else None
        try:
            while following != "done":
                if slot is not None:
                    await slot.before(following)
                following = await phases[following]()
            self.state.outcome = "merged"
            self.state.detail = self.merged_detail or "Merged the approved commit."
        except Finished as finished:
            self.finished(finished)
        except ActivityError as error:
            self.failed(error)
        self.end_work_round()
        if slot is not None:
            await slot.release()

    def installation_slot(self) -> InstallationSlot:
        """One per run: its step numbers go on across resumed work rounds."""
        if self.slot is None:
            self.slot = InstallationSlot(self)
        return self.slot

    def finished(self, finished: Finished) -> None:
        self.state.outcome = finished.outcome
        self.state.detail = finished.detail or None
        self.state.next_steps = finished.next_steps
        if finished.resume_at is not None and self.ctx.patched("needs-human-waits-for-operator"):
            # Runs recorded before this change parked for good here.
            self.resume_at = finished.resume_at
            self.state.next_steps = RESUME_STEPS

    def failed(self, error: ActivityError) -> None:
        self.state.outcome = "error"
        self.state.detail = (
            f"`{error.activity}` failed after {error.attempts} attempt(s) "
            f"({error.failure_class}): {error.message}"
        )

    # -- the one place a run ends -----------------------------------------------

    async def conclude(self) -> None:
        """Clean what the ending leaves to clean, then the final comment and check."""
        outcome = self.state.outcome
        landed = ("merged", "merged-by-human", "fix-not-confirmed")
        if outcome in landed and not self.config.keep_branch_after_merge:
            await self.delete_branch("delete-branch")
        elif outcome == "branch-deleted":
            await self.close_pull("The branch of this pull request was deleted.", "close-pull")
        await self.final_report()

    async def final_report(self) -> None:
        # After ``issues.deleted`` the status comment went with the issue: the
        # check run alone says how the run ended.
        if not self.issue_deleted():
            try:
                await self.report()
            except ActivityError as error:
                self.state.leftovers.append(f"the final status comment: {error.message}")
        sha = self.state.proposed_sha or self.state.base_sha
        if sha is None and self.ctx.patched("verified-check-on-base-head"):
            # The run ended before it read its base (the trigger check failed):
            # the check run goes on the base branch's head, so it is seen too.
            sha = await self.base_head_for_check()
        if sha is None:
            return
        try:
            await self.check(sha, final=True, step="check-final")
        except ActivityError as error:
            self.state.leftovers.append(f"the check run on {sha[:12]}: {error.message}")

    def issue_deleted(self) -> bool:
        """Whether ``issues.deleted`` came for the run's issue (signalled just
        before its cancel). Runs recorded before this change tried the status
        comment anyway and ended ``cleanup-incomplete`` for it."""
        return bool(self.ctx.pending_signals(ISSUE_DELETED)) and self.ctx.patched(
            "deleted-issue-ends-cleanly"
        )

    async def base_head_for_check(self) -> str | None:
        try:
            head = await call(
                self.ctx,
                github.branch_head,
                github.BranchInput(**self.repo_fields(), branch=self.request.default_branch),
                step="check-final-base",
            )
        except ActivityError as error:
            self.state.leftovers.append(f"the final check run: {error.message}")
            return None
        return head.sha

    async def refresh_pull(self) -> github.PullView | None:
        """The pull request's true state before cleaning (a human, or a merge in
        flight, may have closed or merged it); what GitHub showed, if it answered."""
        pull = self.state.pull
        if pull is None:
            return None
        try:
            seen = await call(
                self.ctx,
                github.read_pull_request,
                github.PullInput(**self.repo_fields(), number=pull.number),
                step="cancel-read-pull",
            )
        except ActivityError:
            return None  # closing will find out
        pull.state = "merged" if seen.merged else "closed" if seen.state == "closed" else "open"
        return seen

    async def close_pull(self, why: str, step: str) -> None:
        pull = self.state.pull
        if pull is None or pull.state != "open":
            return
        try:
            await call(
                self.ctx,
                github.close_pull,
                github.ClosePullInput(
                    **self.repo_fields(),
                    number=pull.number,
                    comment=f"repairbot closed this pull request: {why}",
                    op_run=self.ctx.run_id,
                    op_step=step,
                ),
                step=step,
            )
            pull.state = "closed"
        except ActivityError as error:
            self.state.leftovers.append(f"pull request #{pull.number}: {error.message}")

    async def delete_branch(self, step: str) -> None:
        branch = self.state.branch
        if branch is None or self.state.branch_deleted or not self.state.pushed:
            return
        try:
            deleted = await call(
                self.ctx,
                github.delete_branch,
                github.DeleteBranchInput(
                    **self.repo_fields(),
                    branch=branch,
                    sha=self.state.pushed[-1],
                    head_repo=self.state.head_repo,
                ),
                step=step,
            )
        except ActivityError as error:
            self.state.leftovers.append(f"branch {branch}: {error.message}")
            return
        if deleted.deleted:
            self.state.branch_deleted = True
        else:
            self.state.leftovers.append(f"branch {branch}: {deleted.reason}")

    # -- cancellation -------------------------------------------------------------

    async def cancel(self, reason: str) -> None:
        """Stop active work, keep the evidence, clean what the run owns, say so."""
        await self.ctx.stop_active_work()
        merging = self.inflight.get("merge")
        self.settle_inflight()
        seen = await self.refresh_pull()
        if merging is not None and self.ctx.patched("cancel-reconciles-merge"):
            # Runs recorded before this change closed the pull request here
            # unless the read above happened to see it merged.
            landed = self.merge_landed(merging, seen)
            if landed is not None:
                await self.merged_despite_cancel(reason, landed)
                return
        self.end_work_round()
        self.ctx.enter_cancel_phase("preserving-evidence")
        self.state.outcome = "cancelled"
        self.state.next_steps = None
        self.state.detail = f"Cancelled: {reason}. Evidence is kept."
        self.ctx.enter_cancel_phase("cleaning-owned-resources")
        await self.close_pull(f"the run was cancelled ({reason}).", "cancel-close-pull")
        if self.config.cleanup_branch_on_cancel:
            await self.delete_branch("cancel-delete-branch")
        if self.state.leftovers:
            self.state.outcome = "cleanup-incomplete"
        await self.final_report()
        if self.state.leftovers:
            raise CleanupIncomplete("cleanup could not finish", leftovers=self.state.leftovers)

    def merge_landed(self, merging: WorkflowFuture, seen: github.PullView | None) -> str | None:
        """The merge commit if the merge in flight at the cancel happened: its
        own answer, or (answer lost) GitHub's pull request merged at the
        approved commit. None when it did not, or nobody can tell."""
        approval = self.state.approval
        if merging.done and merging.error is None:
            answer = github.MergeResult.model_validate(merging.result)
            if answer.outcome == "merged":
                return answer.merge_commit_sha or ""
        at_approved = approval is not None and seen is not None and seen.head_sha == approval.commit
        if seen is not None and seen.merged and at_approved:
            return seen.merge_commit_sha or ""
        return None

    async def merged_despite_cancel(self, reason: str, merge_commit: str) -> None:
        """The cancel came too late to stop the merge: say so, and clean up as
        after any merge (never close a merged pull request)."""
        assert self.state.pull is not None and self.state.approval is not None
        self.end_work_round()
        self.ctx.enter_cancel_phase("preserving-evidence")
        self.ctx.enter_cancel_phase("cleaning-owned-resources")
        self.state.pull.state = "merged"
        self.state.merge_commit_sha = merge_commit or None
        self.state.outcome = "merged"
        self.state.next_steps = (
            "Nothing, unless the fix should not have landed: then revert the merge commit."
        )
        made = f" as `{merge_commit[:12]}`" if merge_commit else ""
        self.state.detail = (
            f"Cancelled ({reason}) too late: GitHub had already merged the approved "
            f"commit `{self.state.approval.commit[:12]}`{made}."
        )
        # As conclude() after a merge, with this path's own steps (the cancel
        # may have stopped conclude's own before they started).
        if not self.config.keep_branch_after_merge:
            await self.delete_branch("cancel-delete-branch")
        await self.final_report()

    def result(self) -> RunSummary:
        return self.state.summary()


# The cancel phases the untyped declaration allowed it (the engine's legacy
# set), named here: cancelled runs recorded them.
@typed_workflow(
    "repair", version=2, cancel_phases=("preserving-evidence", "cleaning-owned-resources")
)
async def repair(ctx: WorkflowContext, request: RunRequest) -> RunSummary:
    return await Repair(ctx, request).run()


WORKFLOWS = [repair_v1.repair, repair]
