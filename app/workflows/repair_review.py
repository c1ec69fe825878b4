"""Waiting for a review and merging: the phases where humans act.

While a run waits, webhooks reach it as signals; a durable periodic drift
check (a workflow timer; the interval doubles while nothing changes) re-reads
GitHub so that a lost webhook, a deleted branch, a pull request closed or
merged by hand, or a deleted or edited status comment is noticed anyway.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from app.contracts import approval as binding
from app.contracts import github, repo_commands
from app.contracts.agent import FeedbackInput
from app.contracts.repo_commands import BaselineTests, StepInput
from app.contracts.requests import (
    PR_CLOSED,
    PR_SYNCHRONIZED,
    REVIEW,
    PullClosedSignal,
    PullSynchronizedSignal,
    ReviewSignal,
)
from app.engine import Signal, WorkflowCancelled
from app.workflows.base_evidence import baseline_sentence
from app.workflows.calls import call
from app.workflows.permissions import may_write
from app.workflows.repair_base import POLICY_VERSION, Finished, RunBase
from app.workflows.state import Approval, Next, PullState

WAITED_FOR = (REVIEW, PR_CLOSED, PR_SYNCHRONIZED)
#: The drift check's interval grows to at most this many times the configured one.
DRIFT_BACKOFF_CAP = 16


class ReviewPhases(RunBase):
    renew_reason: str | None = None
    seen_reviews: frozenset[int] = frozenset()
    drift_checks = 0
    merge_rounds = 0
    #: The base branch's head as this merge round's policy recheck read it.
    base_at_recheck: str | None = None

    # -- awaiting-review ----------------------------------------------------------

    async def await_review(self) -> Next:
        """Durably wait for an approval that counts, for changes requested, or for
        a human ending the proposal."""
        limits = self.state.limits
        deadline = self.ctx.now() + timedelta(seconds=limits.review_wait_seconds)
        assert self.state.proposed_sha is not None
        waiting = (
            "Waiting for a review: an approval from someone with write access, on commit "
            f"`{self.state.proposed_sha[:12]}`, lets repairbot merge."
        )
        reason, self.renew_reason = self.renew_reason, None
        await self.report("awaiting-review", f"{reason} {waiting}" if reason else waiting)
        base_interval = float(self.config.drift_check_seconds)
        interval = base_interval
        while True:
            remaining = (deadline - self.ctx.now()).total_seconds()
            if remaining <= 0:
                raise Finished(
                    "review-timed-out",
                    f"No approval within {limits.review_wait_seconds / 3600:.1f} hours.",
                )
            signal = await self.ctx.wait_signal(WAITED_FOR, timeout=min(interval, remaining))
            if signal is None:
                following = await self.drift_check()
                interval = min(interval * 2, base_interval * DRIFT_BACKOFF_CAP)
            else:
                following = await self.on_signal(signal)
                interval = base_interval
            if following is not None:
                return following

    async def on_signal(self, signal: Signal) -> Next | None:
        pull = self.state.pull
        assert pull is not None
        if signal.name == PR_CLOSED:
            closed = PullClosedSignal.model_validate(signal.payload)
            if closed.number != pull.number:
                return None  # another pull request (a fork's, say): not ours
            self.closed_by_human(closed.merged, f"By @{closed.by}.")
        if signal.name == PR_SYNCHRONIZED:
            sync = PullSynchronizedSignal.model_validate(signal.payload)
            if sync.number != pull.number or sync.head_sha in self.state.pushed:
                return None
            raise Finished(
                "human-pushed", f"@{sync.by} pushed `{sync.head_sha[:12]}` to the branch."
            )
        review = ReviewSignal.model_validate(signal.payload)
        if review.pull_number != pull.number:
            return None
        return await self.on_review(review)

    def closed_by_human(self, merged: bool, detail: str) -> None:
        assert self.state.pull is not None
        self.state.pull.state = "merged" if merged else "closed"
        raise Finished("merged-by-human" if merged else "closed-by-human", detail)

    async def on_review(self, review: ReviewSignal) -> Next | None:
        if review.action == "dismissed" or review.state == "dismissed":
            approval = self.state.approval
            if approval is not None and approval.review_id == review.review_id:
                self.state.approval = None
            return None
        if review.review_id in self.seen_reviews:
            return None  # the webhook and the drift check both saw it
        self.seen_reviews = self.seen_reviews | {review.review_id}
        if review.state not in ("approved", "changes_requested"):
            return None
        if not await may_write(
            self.ctx, review.reviewer, step=f"reviewer-{review.review_id}", **self.repo_fields()
        ):
            await self.report(
                detail=f"A review by @{review.reviewer} was ignored: reviews count only from "
                "people with write access."
            )
            return None
        if review.state == "changes_requested":
            return self.changes_requested(review)
        return await self.approved(review)

    def changes_requested(self, review: ReviewSignal) -> Next:
        usage, limits = self.state.usage, self.state.limits
        if usage.attempts >= limits.repair_attempts:
            raise Finished(
                "budget-exhausted",
                f"@{review.reviewer} asked for changes, but all {limits.repair_attempts} "
                "repair attempt(s) are spent.",
                next_steps="Change the pull request yourself, or raise "
                "`budgets.repair_attempts` and comment `/repair retry`.",
            )
        self.feedback.append(
            FeedbackInput(kind="review", text=f"Review by @{review.reviewer}: {review.body}")
        )
        self.renew_reason = f"Updated the proposal after @{review.reviewer}'s review."
        self.start_work_round()
        return "repairing"

    async def approved(self, review: ReviewSignal) -> Next | None:
        proposed = self.state.proposed_sha
        assert proposed is not None
        if review.commit_id != proposed:
            await self.report(
                detail=f"An approval by @{review.reviewer} was for commit "
                f"`{review.commit_id[:12]}`, not the proposed `{proposed[:12]}`: it does not count."
            )
            return None
        submitted = (
            datetime.fromisoformat(review.submitted_at) if review.submitted_at else self.ctx.now()
        )
        expires = self.expires(submitted)
        if self.ctx.now() >= expires:
            await self.report(
                detail=f"The approval by @{review.reviewer} was submitted at "
                f"{submitted.isoformat()} and expired after "
                f"{self.state.limits.approval_ttl_hours} hours: please approve again."
            )
            return None
        evidence_hash, policy, bound = self.state.patch_sha, POLICY_VERSION, False
        if self.ctx.patched("verified-approval-binding"):
            # Runs recorded before this change bound the patch's hash and the
            # build's constant, and compared them with copies of themselves.
            evidence_hash = await self.evidence_bundle(f"evidence-{review.review_id}")
            policy = (await self.policy_in_force(f"policy-{review.review_id}")).digest
            bound = True
        self.state.approval = Approval(
            reviewer=review.reviewer,
            review_id=review.review_id,
            commit=proposed,
            evidence_hash=evidence_hash,
            policy_version=policy,
            submitted_at=submitted.isoformat(),
            expires_at=expires.isoformat(),
            bound=bound,
        )
        return "merging"

    async def evidence_bundle(self, step: str) -> str:
        """One hash over every evidence item of the proposal, read back from the
        evidence store (an unreadable item hashes as such, so it never matches)."""
        bundle = await call(
            self.ctx,
            binding.evidence_bundle,
            binding.BundleInput(
                items=[
                    binding.BundleItem(label=item.label, ref=item.ref)
                    for item in self.state.evidence
                ]
            ),
            step=step,
        )
        return bundle.bundle_hash

    async def policy_in_force(self, step: str) -> github.PolicyResult:
        """The policy now: this build's version and the base branch's config
        (``at``: the base branch's head it was read at)."""
        return await call(
            self.ctx,
            github.policy_digest,
            github.PolicyInput(
                **self.repo_fields(),
                branch=self.request.default_branch,
                policy_version=POLICY_VERSION,
            ),
            step=step,
        )

    async def binding_broken(self, bound: Approval, n: int) -> str | None:
        """Why the approval no longer holds, from values read now: the evidence
        bundle re-hashed from the store, the policy from the base's config, the
        reviewer's permission from GitHub. None when it holds."""
        if await self.evidence_bundle(f"evidence-recheck-{n}") != bound.evidence_hash:
            return "The evidence changed since the approval: please review again."
        policy = await self.policy_in_force(f"policy-recheck-{n}")
        self.base_at_recheck = policy.at
        if policy.digest != bound.policy_version:
            return (
                "The policy changed since the approval (repairbot's version or "
                "`.github/repairbot.yml` on the base branch): please review again."
            )
        if not await may_write(
            self.ctx, bound.reviewer, step=f"approver-recheck-{n}", **self.repo_fields()
        ):
            return (
                f"@{bound.reviewer} no longer has write access, so their approval does not "
                "count any more: someone with write access must approve."
            )
        return None

    # -- the drift check ----------------------------------------------------------

    async def observe(self, step: str) -> github.ObserveResult:
        pull = self.state.pull
        return await call(
            self.ctx,
            github.observe,
            github.ObserveInput(
                **self.repo_fields(),
                op_run=self.ctx.run_id,
                op_step="status",
                issue_number=self.request.issue_number,
                pull_number=pull.number if pull is not None else None,
                branch=self.state.branch if not self.state.branch_deleted else None,
                status_sha256=self.status_sha,
                head_repo=self.state.head_repo,
            ),
            step=step,
        )

    async def drift_check(self) -> Next | None:
        """Re-read GitHub; move the run to the right end or repair our own objects."""
        self.drift_checks += 1
        seen = await self.observe(f"drift-{self.drift_checks}")
        self.settle_pull(seen)
        if seen.issue_state == "closed":
            raise WorkflowCancelled("the issue was closed (noticed by the drift check)")
        if seen.status_comment in ("missing", "edited"):
            what = "deleted" if seen.status_comment == "missing" else "edited"
            await self.report(
                detail=f"The status comment was {what} by someone; repairbot wrote it again."
            )
        for review in sorted(seen.reviews, key=lambda r: r.review_id):
            assert self.state.pull is not None
            following = await self.on_review(review.observed(self.state.pull.number))
            if following is not None:
                return following
        return None

    def settle_pull(self, seen: github.ObserveResult) -> None:
        """End the run if a human merged or closed the pull request, deleted or moved
        the branch."""
        if seen.pull is not None:
            if seen.pull.merged:
                self.closed_by_human(True, "Noticed by repairbot's check of the pull request.")
            if seen.pull.state == "closed":
                self.closed_by_human(False, "Noticed by repairbot's check of the pull request.")
        if self.state.branch is not None and not self.state.branch_deleted:
            if seen.branch_sha is None:
                self.state.branch_deleted = True
                raise Finished("branch-deleted", f"Branch `{self.state.branch}` is gone.")
            if seen.branch_sha not in self.state.pushed:
                raise Finished(
                    "human-pushed",
                    f"Branch `{self.state.branch}` is at `{seen.branch_sha[:12]}`, a commit "
                    "repairbot did not push.",
                )

    # -- merging ------------------------------------------------------------------

    def renew(self, reason: str) -> Next:
        self.state.approval = None
        self.renew_reason = reason
        return "awaiting-review"

    async def drain_signals(self) -> Next | None:
        """Signals that arrived since the approval (a dismissal, a push, a close)."""
        while any(self.ctx.pending_signals(name) for name in WAITED_FOR):
            signal = await self.ctx.wait_signal(WAITED_FOR)
            held = self.state.approval
            following = await self.on_signal(signal)
            if held is not None and self.state.approval is None:
                return self.renew(
                    f"The approval by @{held.reviewer} was dismissed: please review again."
                )
            if following is not None and following != "merging":
                return following
        return None

    async def merge(self) -> Next:
        """Revalidate the approval against GitHub's state, then merge pinned to it."""
        approval = self.state.approval
        assert approval is not None and self.state.pull is not None
        self.merge_rounds += 1
        n = self.merge_rounds
        await self.report("merging")
        drained = await self.drain_signals()
        if drained is not None:
            return drained
        seen = await self.observe(f"revalidate-{n}")
        self.settle_pull(seen)
        if any(r.review_id == approval.review_id and r.state == "dismissed" for r in seen.reviews):
            return self.renew(
                f"The approval by @{approval.reviewer} was dismissed: please review again."
            )
        assert seen.pull is not None
        if seen.pull.head_sha != approval.commit:
            return self.head_moved(seen.pull.head_sha)
        if approval.bound:
            broken = await self.binding_broken(approval, n)
            if broken is not None:
                return self.renew(broken)
        elif (
            approval.evidence_hash != self.state.patch_sha
            or approval.policy_version != POLICY_VERSION
        ):
            return self.renew(
                "The evidence or the policy changed since the approval: please review again."
            )
        if self.ctx.now() >= datetime.fromisoformat(approval.expires_at):
            return self.renew("The approval expired before the merge: please approve again.")
        renewed = await self.base_moved(n)
        if renewed is not None:
            return renewed
        if seen.pull.draft:
            if not self.state.pull.draft and self.ctx.patched("verified-draft-needs-approval"):
                # repairbot had marked it ready; a human turned it back into a
                # draft (after a refused merge, say): that is a "not yet". Runs
                # recorded before this change marked it ready again and merged.
                self.state.pull.draft = True
                return self.renew(
                    "The pull request was turned back into a draft after repairbot marked it "
                    "ready: approve again to have it merged."
                )
            # The revalidating read above saw it a draft and named its node:
            # the mutation needs no read of its own. Runs recorded before
            # this change (their reads carry no node id) read it again.
            node_id = seen.pull.node_id
            if node_id is not None and not self.skips_known_reads():
                node_id = None
            await call(
                self.ctx,
                github.ready_for_review,
                github.ReadyInput(
                    **self.repo_fields(), number=self.state.pull.number, node_id=node_id
                ),
                step=f"ready-{n}",
            )
            self.state.pull.draft = False
        pinned = github.MergeInput(
            **self.repo_fields(),
            number=self.state.pull.number,
            sha=approval.commit,
            method=self.config.merge_method,
        )
        # A cancel meeting the merge in flight, or arriving after it while the
        # run concludes, asks before any cleanup whether it landed (Repair.cancel).
        merged = github.MergeResult.model_validate(
            await self.working(
                github.merge, pinned, step=f"merge-{n}", inflight="merge", budgeted=False
            )
        )
        if merged.outcome == "merged":
            self.state.merge_commit_sha = merged.merge_commit_sha
            self.state.pull.state = "merged"
            if self.ctx.patched("verified-confirm-on-base"):
                # Runs recorded before this change ended at the merge answer.
                self.state.confirms_on_base = True
                return "confirming"
            return "done"
        if merged.outcome == "head-moved" and merged.head_sha:
            return self.head_moved(merged.head_sha)
        raise Finished(
            "needs-human",
            f"GitHub refused the merge: {merged.reason or merged.outcome}",
            resume_at="merging",
        )

    def head_moved(self, head: str) -> Next:
        if head in self.state.pushed:
            return self.renew(
                "repairbot updated the pull request after the approval: please review the "
                "current commit."
            )
        raise Finished(
            "human-pushed",
            f"The pull request's head moved to `{head[:12]}` after the approval, and repairbot "
            "did not push it.",
        )

    async def base_head_now(self, n: int) -> str:
        """The base branch's head now: as this merge round's policy recheck read
        it a step ago (the policy it checked is that commit's), else read here."""
        seen, self.base_at_recheck = self.base_at_recheck, None
        if seen is not None and self.ctx.patched("merge-base-from-policy-recheck"):
            # Runs recorded before this change read the head a second time.
            return seen
        base = await call(
            self.ctx,
            github.branch_head,
            github.BranchInput(**self.repo_fields(), branch=self.request.default_branch),
            step=f"base-recheck-{n}",
        )
        return base.sha

    async def base_moved(self, n: int) -> Next | None:
        head = await self.base_head_now(n)
        if head == self.reviewed_base:
            return None
        if self.ctx.patched("verified-rebuild-on-base"):
            # Runs recorded before this change merged the old head: a squash of
            # a branch built on a rewritten base brought the removed commits back.
            return await self.rebuild_on_base(head, n)
        if self.config.on_base_moved == "rereview":
            # The next approval is given on the pull request as it stands on this base.
            self.reviewed_base = head
            return self.renew(
                "The base branch moved since the approval; policy asks for a new review."
            )
        verdict = await call(
            self.ctx,
            repo_commands.verify_candidate,
            self.verify_input(head, self.patch),
            step=f"reverify-{n}",
        )
        if verdict.verdict != "verified":
            raise Finished(
                "needs-human",
                f"The base branch moved and the fix no longer verifies on it ({verdict.verdict}).",
                resume_at="merging",
            )
        self.reviewed_base = head
        self.state.detail = f"Base moved to `{head[:12]}`; the fix still verifies."
        return None

    async def rebuild_on_base(self, base_sha: str, n: int) -> Next | None:
        """What lands is what was verified: rebuild the proposal on the moved
        base (a new commit whose parent is the base's tip, so GitHub's merge
        base is that tip and the pull request's diff is the patch alone),
        verify it again, push it over our own head (force-with-lease). A
        rewritten base, or a policy of ``rereview``, needs a fresh approval of
        the new head; after a fast-forward the approval moves to it."""
        approval, old_base = self.state.approval, self.reviewed_base
        assert approval is not None and old_base is not None and self.patch is not None
        relation = await call(
            self.ctx,
            github.compare,
            github.CompareInput(**self.repo_fields(), base=old_base, head=base_sha),
            step=f"base-compare-{n}",
        )
        short = base_sha[:12]
        verify = self.verify_input(base_sha, self.patch)
        if self.config.test is not None and self.ctx.patched("baseline-on-moved-base"):
            # Runs recorded before this change required every test to pass on
            # the new base, so a test failing there already failed the fix.
            baseline = await self.baseline_on(base_sha, n)
            if baseline is not None:
                verify = verify.model_copy(update={"baseline": baseline})
        verdict = await call(
            self.ctx,
            repo_commands.verify_candidate,
            verify,
            step=f"reverify-{n}",
        )
        self.keep_verification(verdict, f"the fix on `{short}`")
        if verdict.verdict == "patch-rejected":
            raise Finished(
                "needs-human",
                f"The base branch moved to `{short}` and the fix no longer applies to it: "
                "it cannot be rebuilt there, so nothing was merged.",
                next_steps="Resolve the conflict in a pull request of your own, or comment "
                "`/repair retry` to repair the issue again on the new base.",
            )
        if verdict.verdict != "verified":
            raise Finished(
                "needs-human",
                f"The base branch moved to `{short}` and the fix no longer verifies on it "
                f"({verdict.verdict}).",
                resume_at="merging",
            )
        rebuilt = await self.republish(base_sha, f"rebase-{n}")
        self.reviewed_base = base_sha
        self.state.base_sha = base_sha
        if relation.status != "ahead":
            return self.renew(
                f"The base branch was rewritten (`{old_base[:12]}` is no longer in its "
                f"history); repairbot rebuilt the proposal on `{short}` as `{rebuilt[:12]}` "
                "and verified it again: please review and approve the new commit."
            )
        if self.config.on_base_moved == "rereview":
            return self.renew(
                f"The base branch moved to `{short}`; repairbot rebuilt the proposal on it as "
                f"`{rebuilt[:12]}` and verified it again; policy asks for a new review."
            )
        carried = {"commit": rebuilt, "carried_from": approval.commit}
        if approval.bound:
            # The approval moves to the same patch on the fast-forwarded base, with
            # the verification made there: bind the grown evidence bundle.
            carried["evidence_hash"] = await self.evidence_bundle(f"evidence-rebind-{n}")
        self.state.approval = approval.model_copy(update=carried)
        self.state.detail = (
            f"Base moved (fast-forward) to `{short}`; the proposal was rebuilt on it as "
            f"`{rebuilt[:12]}` with the same patch and verifies."
        )
        return "merging"

    async def baseline_on(self, base_sha: str, n: int) -> BaselineTests | None:
        """The tests on the moved base, without the fix: the yardstick the
        rebuilt proposal is judged by (tests already failing there are not
        blamed on it). None when the test command cannot run there."""
        result = await call(
            self.ctx,
            repo_commands.run_reproduction,
            StepInput(
                workspace=self.spec(base_sha),
                setup=self.config.setup,
                setup_network=self.config.network == "setup",
                commands=self.reproduction,
                time_limit_seconds=self.config.budgets.time_limit_seconds,
                reuse_env=self.config.setup_once,
                baseline_test=self.config.test,
            ),
            step=f"base-tests-{n}",
        )
        baseline = result.baseline
        if baseline is None or baseline.cannot_run is not None:
            return None
        self.state.add_evidence(f"tests on the moved base `{base_sha[:12]}`", baseline.step.log)
        self.state.tests_on_base = baseline_sentence(baseline)
        return baseline

    async def republish(self, base_sha: str, label: str) -> str:
        """The same patch as a new commit on ``base_sha``, pushed over our own head."""
        assert self.patch is not None and self.state.branch is not None and self.state.pushed
        request = self.request
        commit = github.CommitInput(
            **self.repo_fields(),
            base_sha=base_sha,
            patch_sha=self.patch.sha256,
            message=f"Fix #{request.issue_number}: {request.issue_title}\n\n"
            f"Proposed by repairbot run {self.ctx.run_id} (attempt {self.state.usage.attempts}), "
            f"rebuilt on `{base_sha[:12]}`.",
            timestamp=self.ctx.now().isoformat(),
        )
        built = await call(
            self.ctx,
            github.build_intended_commit,
            commit,
            step=f"commit-{label}",
        )
        self.keep_tree(built)
        expected = self.state.pushed[-1]
        pushed = await call(
            self.ctx,
            github.push_branch,
            github.PushInput(
                **commit.model_dump(),
                branch=self.state.branch,
                sha=built.sha,
                expected=expected,
                # The proposal's home: the fork it was published to (None: the base).
                head_repo=self.state.head_repo,
            ),
            step=f"push-{label}",
        )
        if pushed.status == "lease-refused":
            raise Finished(
                "human-pushed",
                f"Branch `{self.state.branch}` was moved by someone else (now at "
                f"`{(pushed.remote_sha or '')[:12]}`); repairbot will not overwrite it.",
            )
        self.state.pushed.append(built.sha)
        self.state.proposed_sha = built.sha
        for old in self.checks_open:
            await self.check_superseded(
                old, label, "The proposal was rebuilt on the moved base branch."
            )
        self.checks_open = [built.sha]
        await self.check(built.sha, final=False, step=f"check-{label}")
        return built.sha

    # -- confirming ---------------------------------------------------------------

    async def confirm(self) -> Next:
        """What landed is what was verified, and the bug is gone there: the merge
        commit's tree (read back from GitHub) must be the verified commit's, and
        the reproduction must pass on the merge commit."""
        approval, merged = self.state.approval, self.state.merge_commit_sha
        assert approval is not None
        await self.report("confirming", "Merged; confirming the fix on the merge commit.")
        if not merged:
            raise Finished(
                "needs-human",
                "GitHub did not say which commit the merge made, so repairbot cannot confirm "
                "that what landed is what was verified: check the base branch by hand.",
            )
        # The verified commit is one the run built: its tree came with it (the
        # commit's sha names it), so only the merge commit's is read. Runs
        # recorded before this change read both back.
        verified = self.built_trees.get(approval.commit)
        if verified is not None and not self.skips_known_reads():
            verified = None
        commits = [merged] if verified is not None else [approval.commit, merged]
        trees = await call(
            self.ctx,
            github.commit_trees,
            github.TreesInput(**self.repo_fields(), commits=commits),
            step="confirm-trees",
        )
        landed = trees.trees.get(merged)
        verified = verified or trees.trees.get(approval.commit)
        if landed is None or landed != verified:
            raise Finished(
                "needs-human",
                f"What landed is not what was verified: the merge commit `{merged[:12]}` has "
                f"tree `{(landed or '?')[:12]}`, the verified commit `{approval.commit[:12]}` "
                f"has tree `{(verified or '?')[:12]}` (the base branch changed during the "
                "merge?). Compare them and revert the merge if it is wrong.",
                next_steps="Compare the merge commit with the verified commit; revert the "
                "merge commit if it carries more than the fix.",
            )
        result = await call(
            self.ctx,
            repo_commands.run_reproduction,
            StepInput(
                workspace=self.spec(merged),
                setup=self.config.setup,
                # The merge commit holds model-written code: it gets no network.
                setup_network=False,
                commands=self.reproduction,
                time_limit_seconds=self.config.budgets.time_limit_seconds,
            ),
            step="confirm-reproduce",
        )
        self.state.add_evidence("reproduction on the merge commit", result.log)
        if not result.reproduced and result.status != "passed":
            self.merged_detail = (
                f"Merged the approved commit as `{merged[:12]}`; its tree is the verified "
                f"tree, but the reproduction could not run on it (`{result.status}`), so the "
                "fix is not confirmed there: check the base branch by hand."
            )
            return "done"
        if result.reproduced:
            await self.propose_revert(merged)
            raise Finished(
                "fix-not-confirmed",
                f"The reproduction still fails on the merge commit `{merged[:12]}` "
                f"(status `{result.status}`).",
            )
        self.merged_detail = (
            f"Merged the approved commit as `{merged[:12]}`; the merge commit's tree is the "
            "verified tree and the reproduction passes on it."
        )
        return "done"

    async def propose_revert(self, merged: str) -> None:
        """A draft pull request reverting the merge, for a human to approve."""
        request = self.request
        reverted = await call(
            self.ctx,
            github.propose_revert,
            github.RevertInput(
                **self.repo_fields(),
                merge_sha=merged,
                base=request.default_branch,
                branch=f"{self.state.branch or 'repairbot'}-revert",
                title=f"Revert the fix for #{request.issue_number}",
                body=f"repairbot merged `{merged[:12]}` for #{request.issue_number}, but the "
                "reproduction still fails on the merge commit. This draft reverts it; "
                "approve and merge it to take the change out.",
                timestamp=self.ctx.now().isoformat(),
                op_run=self.ctx.run_id,
                op_step="revert",
            ),
            step="propose-revert",
        )
        self.state.revert = PullState(number=reverted.number, url=reverted.url)
