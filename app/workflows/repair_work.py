"""The working phases of a repair run: who asked, prepare, reproduce, repair,
publish. Each returns the phase that comes next; none calls another."""

from __future__ import annotations

from app.agent.budget import Caps as AgentCaps
from app.agent.budget import Usage as AgentUsage
from app.contracts import agent, github, repo_commands, workspace
from app.contracts.agent import FeedbackInput, ProposeInput, ProposeResult
from app.contracts.ids import head_owner, run_branch
from app.contracts.repo_commands import BaselineTests, ReproductionResult, StepInput
from app.repo_config import reproduction_from_issue
from app.workflows.base_evidence import (
    baseline_sentence,
    broken_command,
    comparison_sentence,
    setup_failed,
)
from app.workflows.calls import call
from app.workflows.permissions import may_write
from app.workflows.repair_base import Finished, RunBase
from app.workflows.report import pull_request_body
from app.workflows.state import Contract, Limits, Next, PullState


class WorkPhases(RunBase):
    #: The test command's result on the base (runs that recorded one): what
    #: candidates are judged against.
    baseline: BaselineTests | None = None

    # -- who asked: the run's first step -----------------------------------------

    async def sender_may_trigger(self) -> bool:
        """A label counts only from someone with write access (asked through the
        API, first of all); a bot's only if the repository allow-lists it, which
        :meth:`trigger_counts` checks once the config is read."""
        request = self.request
        if request.trigger != "label" or request.sender_is_bot:
            return True
        return await may_write(
            self.ctx, request.requested_by, step="trigger-permission", **self.repo_fields()
        )

    def trigger_counts(self) -> bool:
        request = self.request
        if request.trigger != "label":
            return True
        if request.label != self.config.trigger_label:
            return False
        return not request.sender_is_bot or request.requested_by in self.config.allowed_bots

    async def issue_repro_allowed(self) -> bool:
        """The issue's repro block runs only if its author may write."""
        author = self.request.issue_author
        if reproduction_from_issue(self.request.issue_body) is None:
            return True
        if author is None:
            return False
        if author == self.request.requested_by and self.request.trigger == "comment":
            return True  # the command workflow checked this person already
        return await may_write(
            self.ctx, author, step="issue-author-permission", **self.repo_fields()
        )

    # -- preparing ----------------------------------------------------------------

    async def prepare(self) -> bool:
        """Fix the work contract: base commit, config, reproduction. False: the
        label is not this repository's trigger (the run ends quietly)."""
        # The phase is "preparing" while it prepares, and the comment's first
        # write is "reproducing", a step later. Runs recorded before this
        # change wrote a "preparing" once prepared, overwritten at once (a
        # status write is an activity and a request).
        said_preparing = self.ctx.patched("status-first-at-reproducing")
        if said_preparing:
            self.state.phase = "preparing"
        allowed = await self.issue_repro_allowed()
        head = await call(
            self.ctx,
            github.branch_head,
            github.BranchInput(**self.repo_fields(), branch=self.request.default_branch),
            step="base",
        )
        self.state.base_sha = head.sha
        self.reviewed_base = head.sha
        prepared = await call(
            self.ctx,
            workspace.prepare_workspace,
            workspace.PrepareInput(
                workspace=self.spec(head.sha),
                issue_body=self.request.issue_body,
                issue_repro_allowed=allowed,
            ),
            step="prepare",
        )
        if prepared.config is not None:
            self.config = prepared.config
        if not self.trigger_counts():
            return False
        budgets = self.config.budgets
        self.state.limits = Limits(
            repair_attempts=budgets.repair_attempts,
            tool_retries=budgets.tool_retries,
            total_seconds=budgets.total_seconds,
            max_tokens=budgets.max_tokens,
            max_cost_usd=budgets.max_cost_usd,
            review_wait_seconds=self.config.review_wait_seconds,
            approval_ttl_hours=self.config.approval_ttl_hours,
        )
        self.start_work_round()
        self.state.reproduction_source = prepared.reproduction_source
        self.state.contract = Contract(
            repo=self.request.repo,
            issue=self.request.issue_number,
            base_branch=self.request.default_branch,
            base_sha=head.sha,
            budgets=budgets,
            merge_method=self.config.merge_method,
            policy_version=self.state.policy_version,
            reproduction_source=prepared.reproduction_source,
        )
        if prepared.issue_repro_ignored:
            self.state.reproduction_note = (
                f"The issue's repro block was not used: its author @{self.request.issue_author} "
                "does not have write access, so the repository's configured reproduction ran."
            )
        if not said_preparing:
            await self.report("preparing")
        if prepared.config is None:
            raise Finished(
                "invalid-config", f"`.github/repairbot.yml`: {prepared.config_error or ''}"
            )
        if not prepared.reproduction:
            raise Finished("no-reproduction", prepared.reproduction_error or "")
        self.reproduction = prepared.reproduction
        return True

    # -- reproducing --------------------------------------------------------------

    async def reproduce(self) -> Next:
        await self.report("reproducing")
        assert self.state.base_sha is not None
        request = StepInput(
            workspace=self.spec(self.state.base_sha),
            setup=self.config.setup,
            setup_network=self.config.network == "setup",
            commands=self.reproduction,
            time_limit_seconds=self.config.budgets.time_limit_seconds,
        )
        # Runs recorded before this change ran no tests on the base and took
        # any failure of the reproduction for the bug.
        field = self.ctx.patched("field-baseline-and-broken-commands")
        if field:
            request = request.model_copy(
                update={"baseline_test": self.config.test, "reuse_env": self.config.setup_once}
            )
        result = await self.timed(repo_commands.run_reproduction, request, step="reproduce")
        self.state.reproduced = result.reproduced
        if any(r.network for r in result.results):
            self.state.setup_network = True  # the status comment says so
        self.reproduction_log = result.log
        self.state.add_evidence("reproduction on the base commit", result.log)
        if field:
            self.judge_base(result)
        if not result.reproduced:
            raise Finished(
                "not-reproduced",
                f"The reproduction ended with status `{result.status}` on the base commit.",
            )
        return "repairing"

    def judge_base(self, result: ReproductionResult) -> None:
        """Before any agent time: stop at commands that cannot run on the base
        (a config mistake, not the bug), and keep the tests' result there."""
        if result.status == "setup-failed":
            detail, steps = setup_failed(result)
            raise Finished("invalid-config", detail, next_steps=steps)
        failing = result.failing
        if result.cannot_run is not None and failing is not None:
            detail, steps = broken_command("reproduction", failing, result.cannot_run)
            raise Finished("broken-reproduction", detail, next_steps=steps)
        baseline = result.baseline
        if baseline is None:
            return
        self.state.add_evidence("tests on the base commit", baseline.step.log)
        broken = baseline.step.failing
        if baseline.cannot_run is not None and broken is not None:
            detail, steps = broken_command("test", broken, baseline.cannot_run)
            raise Finished("invalid-config", detail, next_steps=steps)
        self.baseline = baseline
        self.state.tests_on_base = baseline_sentence(baseline)

    # -- repairing ----------------------------------------------------------------

    def _spend(self, proposal: ProposeResult) -> None:
        usage, limits = self.state.usage, self.state.limits
        usage.input_tokens += proposal.input_tokens
        usage.output_tokens += proposal.output_tokens
        usage.cost_usd += proposal.cost_usd
        usage.turns += proposal.turns
        usage.tool_calls += proposal.tool_calls
        if proposal.tool_retries is None:  # recorded before crashes were told apart
            usage.tool_retries += max(0, proposal.tool_attempt - 1)
        else:
            usage.tool_retries += proposal.tool_retries
        usage.agent_interruptions += proposal.interrupted
        if limits.max_tokens is not None and usage.tokens > limits.max_tokens:
            raise Finished(
                "cost-budget-exhausted", f"{usage.tokens} tokens used of {limits.max_tokens}."
            )
        if limits.max_cost_usd is not None and usage.cost_usd > limits.max_cost_usd:
            raise Finished(
                "cost-budget-exhausted",
                f"${usage.cost_usd:.4f} spent of ${limits.max_cost_usd:.2f}.",
            )

    async def repair(self) -> Next:
        """Propose and verify until a candidate passes or the attempt budget is spent."""
        limits, usage = self.state.limits, self.state.usage
        assert self.state.base_sha is not None
        while usage.attempts < limits.repair_attempts:
            usage.attempts += 1
            attempt = usage.attempts
            await self.report("repairing", f"Attempt {attempt}: asking the agent for a fix.")
            request = ProposeInput(
                workspace=self.spec(self.state.base_sha, self.patch),
                agent=self.config.agent,
                issue_title=self.request.issue_title,
                issue_body=self.request.issue_body,
                reproduction=self.reproduction,
                reproduction_log=self.reproduction_log,
                feedback=self.feedback,
                attempt=attempt,
                setup=self.config.setup,
                setup_network=self.config.network == "setup",
                time_limit_seconds=self.config.budgets.time_limit_seconds,
                tool_retries=limits.tool_retries,
            )
            if self.ctx.patched("agent-gets-tests-and-run-usage"):
                # The built-in agent's run_tests tool needs the test command, and
                # its per-run caps need what earlier attempts spent. Runs recorded
                # before this change keep their recorded input.
                request = request.model_copy(
                    update={
                        "test": self.config.test,
                        "run_usage": AgentUsage(
                            turns=usage.turns,
                            tool_calls=usage.tool_calls,
                            input_tokens=usage.input_tokens,
                            output_tokens=usage.output_tokens,
                            cost_usd=usage.cost_usd,
                        ),
                    }
                )
            capped = limits.max_tokens is not None or limits.max_cost_usd is not None
            if capped and self.ctx.patched("agent-stops-at-run-budget"):
                # The built-in loop stops at the repository's token and cost
                # budgets mid-attempt; runs recorded before this change found
                # out only after the attempt.
                caps = AgentCaps(tokens=limits.max_tokens, cost_usd=limits.max_cost_usd)
                request = request.model_copy(update={"run_caps": caps})
            proposal = await self.timed(agent.propose_fix, request, step=f"propose-{attempt}")
            self.state.add_evidence(f"agent transcript, attempt {attempt}", proposal.transcript)
            self._spend(proposal)
            if proposal.outcome != "proposed" or proposal.patch is None:
                self.feedback.append(
                    FeedbackInput(
                        kind="agent",
                        text=f"Attempt {attempt} produced no usable change "
                        f"({proposal.outcome}: {proposal.error or 'no diff'}).",
                    )
                )
                continue
            verify = self.verify_input(self.state.base_sha, proposal.patch)
            if self.baseline is not None:
                verify = verify.model_copy(update={"baseline": self.baseline})
            verdict = await self.timed(
                repo_commands.verify_candidate, verify, step=f"verify-{attempt}"
            )
            self.keep_verification(verdict, f"candidate {attempt}")
            if verdict.verdict == "verified":
                self.patch = proposal.patch
                self.state.patch_sha = proposal.patch.sha256
                self.state.agent_summary = proposal.summary
                self.state.verified = True
                if verdict.comparison is not None:
                    self.state.tests_note = comparison_sentence(verdict.comparison)
                self.state.add_evidence(f"patch, attempt {attempt}", proposal.patch)
                return "publishing"
            failing = verdict.tests or verdict.reproduction
            self.feedback.append(
                FeedbackInput(
                    kind="verification",
                    text=f"Attempt {attempt} did not verify ({verdict.verdict}): "
                    f"{verdict.reason or ''}",
                    evidence=failing.log if failing is not None else None,
                )
            )
        last = self.feedback[-1].text if self.feedback else "nothing"
        raise Finished(
            "budget-exhausted",
            f"{limits.repair_attempts} attempt(s) made; the last one said: {last}",
        )

    # -- publishing ---------------------------------------------------------------

    async def publish(self) -> Next:
        """Deterministic commit, conditional push, draft pull request, check run."""
        await self.report("publishing")
        self.publications += 1
        n = self.publications
        assert self.patch is not None and self.state.base_sha is not None
        request = self.request
        stamp = self.ctx.now()
        commit = github.CommitInput(
            **self.repo_fields(),
            base_sha=self.state.base_sha,
            patch_sha=self.patch.sha256,
            message=f"Fix #{request.issue_number}: {request.issue_title}\n\n"
            f"Proposed by repairbot run {self.ctx.run_id} (attempt {self.state.usage.attempts}).",
            timestamp=stamp.isoformat(),
        )
        if self.state.branch is None and self.ctx.patched("fork-proposals"):
            # Runs recorded before this change pushed to the base repository.
            await self.choose_proposal_repo(n)
        built = await self.timed(github.build_intended_commit, commit, step=f"commit-{n}")
        self.keep_tree(built)
        branch = self.state.branch or run_branch(request.issue_number, self.ctx.run_id)
        expected = self.state.pushed[-1] if self.state.pushed else None
        self.state.branch = branch
        push = github.PushInput(
            **commit.model_dump(),
            branch=branch,
            sha=built.sha,
            expected=expected,
            head_repo=self.state.head_repo,
        )
        pushed = github.PushResult.model_validate(
            await self.working(github.push_branch, push, step=f"push-{n}", inflight="push")
        )
        if pushed.status == "lease-refused":
            if expected is None:
                raise Finished(
                    "needs-human",
                    f"Branch `{branch}` already exists (at `{pushed.remote_sha}`) and is not "
                    "repairbot's: it will not be overwritten.",
                    resume_at="publishing",
                )
            raise Finished(
                "human-pushed",
                f"Branch `{branch}` was moved by someone else (now at `{pushed.remote_sha}`); "
                "repairbot will not overwrite it.",
            )
        self.state.pushed.append(built.sha)
        self.state.proposed_sha = built.sha
        proposal = github.PullRequestInput(
            **self.repo_fields(),
            head=branch,
            base=request.default_branch,
            title=f"Fix #{request.issue_number}: {request.issue_title}",
            body=pull_request_body(self.state),
            op_run=self.ctx.run_id,
            op_step="pull-request",
            head_owner=head_owner(self.state.head_repo),
        )
        pull = github.PullView.model_validate(
            await self.working(
                github.pull_request, proposal, step=f"pull-request-{n}", inflight="pull"
            )
        )
        self.inflight.clear()
        self.opened(pull)
        self.end_work_round()
        for old in self.checks_open:
            await self.check_superseded(old, n)
        self.checks_open = [built.sha]
        await self.check(built.sha, final=False, step=f"check-{n}")
        return "awaiting-review"

    async def choose_proposal_repo(self, n: int) -> None:
        """Where the proposal goes: the proposal account's fork, or (the operator's
        opt-in) the base repository; with neither configured, the run parks
        with a status comment that says how to configure it."""
        # The fork's parent is known by the id the run is keyed by: no read of
        # the base repository to learn it. Runs recorded before this change
        # (and requests that carry no id) had the activity read it by name.
        repo_id = self.request.repo_id
        if repo_id is not None and not self.skips_known_reads():
            repo_id = None
        target = await call(
            self.ctx,
            github.proposal_repo,
            github.ProposalRepoInput(**self.repo_fields(), repo_id=repo_id),
            step=f"proposal-repo-{n}",
        )
        if target.repo is None:
            raise Finished(
                "needs-human",
                target.refused or "repairbot has nowhere to publish this proposal.",
                resume_at="publishing",
            )
        self.state.head_repo = None if target.repo == self.request.repo else target.repo

    def opened(self, pull: github.PullView) -> None:
        self.state.pull = PullState(
            number=pull.number,
            url=pull.url,
            state="merged" if pull.merged else "closed" if pull.state == "closed" else "open",
            draft=pull.draft,
        )

    def settle_inflight(self) -> None:
        """After cancellation stopped active work: take in what a push or a pull
        request that was in flight did, so cleanup knows the branch and the PR."""
        push, pull = self.inflight.get("push"), self.inflight.get("pull")
        if push is not None and push.done and push.error is None:
            pushed = github.PushResult.model_validate(push.result)
            if (
                pushed.status != "lease-refused"
                and pushed.sha
                and pushed.sha not in self.state.pushed
            ):
                self.state.pushed.append(pushed.sha)
                self.state.proposed_sha = pushed.sha
        if pull is not None and pull.done and pull.error is None and self.state.pull is None:
            self.opened(github.PullView.model_validate(pull.result))
        self.inflight.clear()
