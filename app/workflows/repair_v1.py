"""Version 1 of the repair workflow, frozen: runs started on it replay it to
their end (tests/histories/repair_v1_*.json prove it). Do not change its
commands; new behaviour belongs in :mod:`app.workflows.repair` (version 2).

The repair workflow: a labelled issue becomes a reproduced bug, a verified
fix, a draft pull request with evidence, a human approval of the exact commit,
and a sha-pinned merge. Deterministic code only: every effect is an activity.

Phases (each reported in the one status comment): accepted -> preparing ->
reproducing -> repairing (propose + verify, bounded by the attempt budget) ->
publishing -> awaiting-review (durable; "changes requested" loops back to
repairing) -> merging.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.contracts import agent, github, repo_commands, workspace
from app.contracts.ids import repair_branch
from app.engine import (
    ActivityError,
    CleanupIncomplete,
    NeedsHuman,
    WorkflowCancelled,
    WorkflowContext,
    workflow,
)
from app.workflows.report_v1 import pull_request_body, status_comment

POLICY_VERSION = "2026-11-30.1"
WRITE_OR_HIGHER = frozenset({"admin", "maintain", "write"})
#: How long a proposal waits for review before the run reports and ends.
DEFAULT_REVIEW_WAIT = 14 * 24 * 3600.0
CHECK_NAME = "repairbot"


class Finished(Exception):
    """Ends the run with an outcome (reported on the issue, returned as result)."""

    def __init__(self, outcome: str, detail: str = "") -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.detail = detail


class Repair:
    def __init__(self, ctx: WorkflowContext, request: dict[str, Any]) -> None:
        self.ctx = ctx
        self.request = request
        self.state: dict[str, Any] = {
            "run_id": ctx.run_id,
            "policy_version": POLICY_VERSION,
            "phase": "accepted",
            "repo": request["repo"],
            "issue_number": request["issue_number"],
            "base_branch": request["default_branch"],
            "attempts": 0,
            "evidence": [],
        }
        self._status_updates = 0
        self._feedback: list[dict[str, Any]] = []
        self._patch: dict[str, Any] | None = None
        self._pushed_sha: str | None = None
        self._publications = 0
        #: The base branch commit a human's approval is taken to cover.
        self._reviewed_base: str | None = None
        ctx.set_query("status", lambda: dict(self.state))

    # -- small helpers ---------------------------------------------------------

    def _gh(self, **fields: Any) -> dict[str, Any]:
        return {
            "repo": self.request["repo"],
            "installation_id": self.request["installation_id"],
            **fields,
        }

    def _spec(self, base_sha: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "repo": self.request["repo"],
            "clone_url": self.request["clone_url"],
            "base_sha": base_sha,
            "installation_id": self.request["installation_id"],
            "patch": patch,
        }

    def _evidence(self, label: str, ref: dict[str, Any] | None) -> None:
        if ref is not None:
            self.state["evidence"].append({"label": label, "ref": ref})

    async def report(self, phase: str | None = None, detail: str | None = None) -> None:
        """Rewrite the status comment (found by its marker, updated in place)."""
        if phase is not None:
            self.state["phase"] = phase
        if detail is not None:
            self.state["detail"] = detail
        self._status_updates += 1
        await self.ctx.activity(
            github.comment,
            self._gh(
                issue_number=self.request["issue_number"],
                op_run=self.ctx.run_id,
                op_step="status",
                body=status_comment(self.state),
            ),
            step=f"status-{self._status_updates}",
        )

    # -- phases ----------------------------------------------------------------

    async def prepare(self) -> None:
        await self.report("preparing")
        head = await self.ctx.activity(
            github.branch_head, self._gh(branch=self.request["default_branch"]), step="base"
        )
        self.state["base_sha"] = head["sha"]
        self._reviewed_base = head["sha"]
        prepared = await self.ctx.activity(
            workspace.prepare_workspace,
            {"workspace": self._spec(head["sha"]), "issue_body": self.request["issue_body"]},
            step="prepare",
        )
        if prepared["config"] is None:
            raise Finished("invalid-config", f"`.github/repairbot.yml`: {prepared['config_error']}")
        if not prepared["reproduction"]:
            raise Finished("no-reproduction", prepared.get("reproduction_error") or "")
        self.config: dict[str, Any] = prepared["config"]
        self.reproduction: list[Any] = prepared["reproduction"]
        budgets = self.config["budgets"]
        self.state["attempt_budget"] = budgets["repair_attempts"]
        # The work contract: fixed here, recorded in history, never re-read.
        self.state["contract"] = {
            "repo": self.request["repo"],
            "issue": self.request["issue_number"],
            "base_branch": self.request["default_branch"],
            "base_sha": head["sha"],
            "budgets": budgets,
            "merge_method": self.config["merge_method"],
            "policy_version": POLICY_VERSION,
            "reproduction_source": prepared["reproduction_source"],
        }

    async def reproduce(self) -> None:
        await self.report("reproducing")
        result = await self.ctx.activity(
            repo_commands.run_reproduction,
            {
                "workspace": self._spec(self.state["base_sha"]),
                "setup": self.config["setup"],
                "commands": self.reproduction,
                "time_limit_seconds": self.config["budgets"]["time_limit_seconds"],
            },
            step="reproduce",
        )
        self.state["reproduction"] = {"reproduced": result["reproduced"]}
        self._reproduction_log = result["log"]
        self._evidence("reproduction on the base commit", result["log"])
        if not result["reproduced"]:
            raise Finished(
                "not-reproduced",
                f"The reproduction ended with status `{result['status']}` on the base commit.",
            )

    def _check_time(self) -> None:
        elapsed = (self.ctx.now() - self.started).total_seconds()
        if elapsed > self.config["budgets"]["total_seconds"]:
            raise Finished("time-budget-exhausted", f"{elapsed:.0f}s spent")

    async def repair(self) -> None:
        """Propose and verify until a candidate passes or the budget is spent."""
        budget = self.config["budgets"]["repair_attempts"]
        while self.state["attempts"] < budget:
            self._check_time()
            self.state["attempts"] += 1
            attempt = self.state["attempts"]
            await self.report("repairing", f"Attempt {attempt}: asking the agent for a fix.")
            proposal = await self.ctx.activity(
                agent.propose_fix,
                {
                    "workspace": self._spec(self.state["base_sha"], self._patch),
                    "agent": self.config.get("agent"),
                    "issue_title": self.request["issue_title"],
                    "issue_body": self.request["issue_body"],
                    "reproduction": self.reproduction,
                    "reproduction_log": self._reproduction_log,
                    "feedback": self._feedback,
                    "attempt": attempt,
                    "setup": self.config["setup"],
                    "time_limit_seconds": self.config["budgets"]["time_limit_seconds"],
                },
                step=f"propose-{attempt}",
            )
            self._evidence(f"agent transcript, attempt {attempt}", proposal.get("transcript"))
            if proposal["outcome"] != "proposed":
                self._feedback.append(
                    {
                        "kind": "agent",
                        "text": f"Attempt {attempt} produced no usable change "
                        f"({proposal['outcome']}: {proposal.get('error') or 'no diff'}).",
                    }
                )
                continue
            verdict = await self.ctx.activity(
                repo_commands.verify_candidate,
                {
                    "workspace": self._spec(self.state["base_sha"], proposal["patch"]),
                    "setup": self.config["setup"],
                    "reproduction": self.reproduction,
                    "test": self.config.get("test"),
                    "time_limit_seconds": self.config["budgets"]["time_limit_seconds"],
                },
                step=f"verify-{attempt}",
            )
            for step_name in ("reproduction", "tests"):
                step = verdict.get(step_name)
                if step:
                    self._evidence(f"{step_name} with candidate {attempt}", step["log"])
            if verdict["verdict"] == "verified":
                self._patch = proposal["patch"]
                self.state["patch_sha"] = proposal["patch"]["sha256"]
                self.state["agent_summary"] = proposal.get("summary", "")
                self.state["verification"] = {"verdict": "verified"}
                self._evidence(f"patch, attempt {attempt}", proposal["patch"])
                return
            log = (verdict.get("tests") or verdict.get("reproduction") or {}).get("log")
            self._feedback.append(
                {
                    "kind": "verification",
                    "text": f"Attempt {attempt} did not verify ({verdict['verdict']}): "
                    f"{verdict.get('reason') or ''}",
                    "evidence": log,
                }
            )
        raise Finished(
            "budget-exhausted",
            f"{budget} attempt(s) made; the last verification said: "
            f"{self._feedback[-1]['text'] if self._feedback else 'nothing'}",
        )

    async def publish(self) -> None:
        """Deterministic commit, conditional push, draft pull request, check run."""
        await self.report("publishing")
        self._publications += 1
        n = self._publications
        assert self._patch is not None
        stamp = self.ctx.now()
        commit_input = self._gh(
            base_sha=self.state["base_sha"],
            patch_sha=self._patch["sha256"],
            message=f"Fix #{self.request['issue_number']}: {self.request['issue_title']}\n\n"
            f"Proposed by repairbot run {self.ctx.run_id} (attempt {self.state['attempts']}).",
            timestamp=stamp.isoformat(),
        )
        built = await self.ctx.activity(
            github.build_intended_commit, commit_input, step=f"commit-{n}"
        )
        branch = repair_branch(self.request["issue_number"])
        pushed = await self.ctx.activity(
            github.push_branch,
            commit_input | {"branch": branch, "sha": built["sha"], "expected": self._pushed_sha},
            step=f"push-{n}",
        )
        if pushed["status"] == "lease-refused":
            raise Finished(
                "needs-human",
                f"Branch `{branch}` was moved by someone else (now at "
                f"`{pushed.get('remote_sha')}`); repairbot will not overwrite it.",
            )
        self._pushed_sha = built["sha"]
        self.state["proposed_sha"] = built["sha"]
        self.state["branch"] = branch
        pull = await self.ctx.activity(
            github.pull_request,
            self._gh(
                head=branch,
                base=self.request["default_branch"],
                title=f"Fix #{self.request['issue_number']}: {self.request['issue_title']}",
                body=pull_request_body(self.state),
                op_run=self.ctx.run_id,
                op_step="pull-request",
            ),
            step=f"pull-request-{n}",
        )
        self.state["pull_number"] = pull["number"]
        self.state["pull_url"] = pull["url"]
        await self.ctx.activity(
            github.check_run,
            self._gh(
                head_sha=built["sha"],
                op_run=self.ctx.run_id,
                op_step=f"check-{n}",
                name=CHECK_NAME,
                title="Verified: reproduction passes, tests pass",
                summary=pull_request_body(self.state),
                conclusion="success",
            ),
            step=f"check-{n}",
        )

    async def await_approval(self, reason: str | None = None) -> dict[str, Any]:
        """Durably wait for an approval that counts; loop through change requests.

        ``reason``: why a new review is needed (it stays on the status comment).
        """
        wait = float(self.request.get("review_wait_seconds") or DEFAULT_REVIEW_WAIT)
        deadline = self.ctx.now() + timedelta(seconds=wait)
        waiting = (
            "Waiting for a review: an approval from someone with write access, on commit "
            f"`{self.state['proposed_sha'][:12]}`, lets repairbot merge."
        )
        await self.report("awaiting-review", f"{reason} {waiting}" if reason else waiting)
        while True:
            remaining = (deadline - self.ctx.now()).total_seconds()
            if remaining <= 0:
                raise Finished("review-timed-out", f"No approval within {wait / 3600:.0f} hours.")
            signal = await self.ctx.wait_signal(
                ["review", "pr_closed", "pr_synchronized"], timeout=remaining
            )
            if signal is None:
                continue  # the deadline check above ends the run
            payload: dict[str, Any] = signal.payload
            if signal.name == "pr_closed":
                outcome = "merged-by-human" if payload.get("merged") else "closed-by-human"
                raise Finished(outcome, f"By @{payload.get('by')}.")
            if signal.name == "pr_synchronized":
                raise Finished(
                    "needs-human",
                    f"@{payload.get('by')} pushed to the branch; repairbot only merges commits "
                    "it proposed. Comment `/repair retry` to start over.",
                )
            approval = await self._review(payload)
            if approval is not None:
                return approval

    async def _review(self, review: dict[str, Any]) -> dict[str, Any] | None:
        state = review.get("state")
        if review.get("action") == "dismissed" or state not in ("approved", "changes_requested"):
            return None
        reviewer = review["reviewer"]
        granted = await self.ctx.activity(
            github.permission, self._gh(user=reviewer), step=f"reviewer-{review['review_id']}"
        )
        if granted["permission"] not in WRITE_OR_HIGHER:
            await self.report(
                detail=f"A review by @{reviewer} was ignored: reviews count only from people "
                "with write access."
            )
            return None
        if state == "changes_requested":
            self._feedback.append(
                {"kind": "review", "text": f"Review by @{reviewer}: {review.get('body') or ''}"}
            )
            await self.repair()
            await self.publish()
            await self.report(
                "awaiting-review",
                f"Updated the proposal after @{reviewer}'s review; waiting for a new review.",
            )
            return None
        if review.get("commit_id") != self.state["proposed_sha"]:
            await self.report(
                detail=f"An approval by @{reviewer} was for commit "
                f"`{str(review.get('commit_id'))[:12]}`, not the proposed "
                f"`{self.state['proposed_sha'][:12]}`: it does not count."
            )
            return None
        approved_at = self.ctx.now()
        ttl = timedelta(hours=int(self.config["approval_ttl_hours"]))
        return {
            "reviewer": reviewer,
            "review_id": review["review_id"],
            "commit": self.state["proposed_sha"],
            "evidence_hash": self.state.get("patch_sha"),
            "policy_version": POLICY_VERSION,
            "approved_at": approved_at.isoformat(),
            "expires_at": (approved_at + ttl).isoformat(),
        }

    async def merge(self) -> None:
        """Revalidate, then merge pinned to the approved commit."""
        reason: str | None = None
        while True:
            approval = await self.await_approval(reason)
            self.state["approval"] = approval
            await self.report("merging")
            renewed = await self._revalidate(approval)
            if renewed:
                reason = await self._renew_review(renewed)
                continue
            await self.ctx.activity(
                github.ready_for_review,
                self._gh(number=self.state["pull_number"]),
                step=f"ready-{approval['review_id']}",
            )
            merged = await self.ctx.activity(
                github.merge,
                self._gh(
                    number=self.state["pull_number"],
                    sha=approval["commit"],
                    method=self.config["merge_method"],
                ),
                step=f"merge-{approval['review_id']}",
            )
            if merged["outcome"] == "merged":
                self.state["merge_commit_sha"] = merged.get("merge_commit_sha")
                return
            if merged["outcome"] == "head-moved":
                reason = await self._renew_review(
                    "The pull request's head moved after the approval (409): please review "
                    "the current commit again."
                )
                continue
            raise Finished("needs-human", f"GitHub refused the merge (405): {merged.get('reason')}")

    async def _renew_review(self, reason: str) -> str | None:
        """Ask for a new review; the reason to hand to :meth:`await_approval`.

        Reporting the reason on its own was overwritten at once by the
        "waiting for a review" report, so the status comment never said why a
        second review was wanted. Runs recorded before this change replay the
        old commands.
        """
        if self.ctx.patched("renewed-review-keeps-reason"):
            return reason
        await self.report("awaiting-review", reason)
        return None

    async def _revalidate(self, approval: dict[str, Any]) -> str | None:
        """None when the merge may go ahead; otherwise why a new review is needed."""
        pull = await self.ctx.activity(
            github.read_pull_request,
            self._gh(number=self.state["pull_number"]),
            step=f"reread-{approval['review_id']}",
        )
        if pull["merged"]:
            raise Finished("merged-by-human", "The pull request was already merged.")
        if pull["head_sha"] != approval["commit"]:
            return "The pull request's head is no longer the approved commit: please review again."
        if self.ctx.now().isoformat() > approval["expires_at"]:
            return "The approval expired before the merge: please approve again."
        base = await self.ctx.activity(
            github.branch_head,
            self._gh(branch=self.request["default_branch"]),
            step=f"base-recheck-{approval['review_id']}",
        )
        if base["sha"] == self._reviewed_base:
            return None
        if self.config["on_base_moved"] == "rereview":
            if self.ctx.patched("rereview-on-moved-base"):
                # The next approval is given on the pull request as it stands on
                # this base; comparing with the original base forever would ask
                # for a review after every approval and never merge.
                self._reviewed_base = base["sha"]
            return "The base branch moved since the approval; policy asks for a new review."
        verdict = await self.ctx.activity(
            repo_commands.verify_candidate,
            {
                "workspace": self._spec(base["sha"], self._patch),
                "setup": self.config["setup"],
                "reproduction": self.reproduction,
                "test": self.config.get("test"),
                "time_limit_seconds": self.config["budgets"]["time_limit_seconds"],
            },
            step=f"reverify-{approval['review_id']}",
        )
        if verdict["verdict"] != "verified":
            raise Finished(
                "needs-human",
                f"The base branch moved and the fix no longer verifies on it "
                f"({verdict['verdict']}).",
            )
        self.state["detail"] = f"Base moved to `{base['sha'][:12]}`; the fix still verifies."
        return None

    # -- cancellation ----------------------------------------------------------

    async def cancel(self, reason: str) -> None:
        """Stop active work, keep the evidence, clean what the run owns."""
        await self.ctx.stop_active_work()
        self.ctx.enter_cancel_phase("preserving-evidence")
        self.state["outcome"] = "cancelled"
        await self.report(detail=f"Cancelled: {reason}.")
        self.ctx.enter_cancel_phase("cleaning-owned-resources")
        leftovers: list[str] = []
        if self._pushed_sha and self.config.get("cleanup_branch_on_cancel", True):
            if self.state.get("pull_number"):
                try:
                    await self.ctx.activity(
                        github.close_pull,
                        self._gh(number=self.state["pull_number"]),
                        step="cancel-close-pull",
                    )
                except ActivityError as exc:
                    leftovers.append(f"pull request #{self.state['pull_number']}: {exc.message}")
            try:
                deleted = await self.ctx.activity(
                    github.delete_branch,
                    self._gh(branch=self.state["branch"], sha=self._pushed_sha),
                    step="cancel-delete-branch",
                )
                if not deleted["deleted"]:
                    leftovers.append(f"branch {self.state['branch']}: {deleted.get('reason')}")
            except ActivityError as exc:
                leftovers.append(f"branch {self.state['branch']}: {exc.message}")
        if leftovers:
            self.state["outcome"] = "cleanup-incomplete"
            await self.report(detail="Cleanup could not finish: " + "; ".join(leftovers))
            raise CleanupIncomplete("cleanup could not finish", leftovers=leftovers)
        await self.report(detail=f"Cancelled: {reason}. Evidence is kept.")

    # -- the whole run ---------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        self.started = self.ctx.now()
        self.config = {}
        try:
            try:
                await self.report("accepted")
                await self.prepare()
                await self.reproduce()
                await self.repair()
                await self.publish()
                await self.merge()
                self.state["outcome"] = "merged"
                await self.report(detail="Merged the approved commit.")
            except Finished as finished:
                self.state["outcome"] = finished.outcome
                await self.report(detail=finished.detail or None)
                if finished.outcome == "needs-human":
                    # Park the run: it holds the issue until a human retries it.
                    raise NeedsHuman(finished.detail) from None
        except WorkflowCancelled as cancelled:
            await self.cancel(cancelled.reason)
            return self.result()
        return self.result()

    def result(self) -> dict[str, Any]:
        keys = (
            "outcome",
            "attempts",
            "proposed_sha",
            "pull_number",
            "merge_commit_sha",
            "patch_sha",
            "approval",
            "contract",
        )
        return {key: self.state.get(key) for key in keys} | {"evidence": self.state["evidence"]}


@workflow("repair", version=1)
async def repair(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    return await Repair(ctx, request).run()


WORKFLOWS = [repair]
