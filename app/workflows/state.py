"""The repair run's typed state: what the phase loop carries from phase to
phase, what the status comment shows and what the ``status`` query answers.

Everything here is derived from history by replay; nothing is stored apart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.evidence import EvidenceRef
from app.repo_config import Budgets

#: The phases a run works through, in order; ``done`` ends the loop with a
#: merge. ``awaiting-review`` may lead back to ``repairing`` (changes
#: requested) and ``merging`` back to ``awaiting-review`` (a renewed review);
#: nothing else goes backwards. Also what a phase says comes next.
Next = Literal[
    "preparing",
    "reproducing",
    "repairing",
    "publishing",
    "awaiting-review",
    "merging",
    "confirming",
    "done",
]
#: Where a run is: one of the phases, or ``accepted`` before any work.
Phase = Literal["accepted", Next]

#: How a run can end. Each has a headline and next steps in :mod:`report`.
Outcome = Literal[
    "merged",
    "fix-not-confirmed",
    "not-triggered",
    "not-reproduced",
    "broken-reproduction",
    "budget-exhausted",
    "time-budget-exhausted",
    "cost-budget-exhausted",
    "invalid-config",
    "no-reproduction",
    "closed-by-human",
    "merged-by-human",
    "branch-deleted",
    "issue-closed",
    "review-timed-out",
    "human-pushed",
    "needs-human",
    "error",
    "cancelled",
    "cleanup-incomplete",
]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvidenceItem(Model):
    label: str
    ref: EvidenceRef


class Usage(Model):
    """What the run spent, against its budgets (shown in the status comment)."""

    attempts: int = 0
    tool_retries: int = 0
    #: Agent attempts cut short by their worker dying (resumed; not tool retries).
    agent_interruptions: int = 0
    #: The built-in agent's model turns and tool calls (0 for CLI agents).
    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    #: Seconds spent in working phases (reviews waited for do not count).
    work_seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Limits(Model):
    """The budgets fixed at the start (the work contract's numbers)."""

    repair_attempts: int = 3
    tool_retries: int = 2
    total_seconds: float = 4 * 3600
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    review_wait_seconds: float = 14 * 24 * 3600
    approval_ttl_hours: int = 72


class Contract(Model):
    """The work contract: fixed when the run has read the repository, never re-read."""

    repo: str
    issue: int
    base_branch: str
    base_sha: str
    budgets: Budgets
    merge_method: str
    policy_version: str
    reproduction_source: Literal["issue", "config"] | None


class Approval(Model):
    reviewer: str
    review_id: int
    commit: str
    evidence_hash: str | None
    policy_version: str
    #: The commit the reviewer approved, when repairbot moved the approval to
    #: the same patch rebuilt on a fast-forwarded base.
    carried_from: str | None = None
    #: The merge re-reads the evidence bundle, the policy and the reviewer's
    #: permission and compares them with this record (approvals taken before
    #: this binding existed compared copies of the run's own state).
    bound: bool = False
    #: The review's own ``submitted_at``: expiry counts from here.
    submitted_at: str
    expires_at: str


class PullState(Model):
    number: int
    url: str = ""
    #: ``open``, ``closed`` or ``merged``: GitHub's state as last seen.
    state: Literal["open", "closed", "merged"] = "open"
    draft: bool = True


class RunState(Model):
    run_id: str
    policy_version: str
    repo: str
    issue_number: int
    base_branch: str
    phase: Phase = "accepted"
    outcome: Outcome | None = None
    #: The latest sentence for humans (why we wait, what went wrong).
    detail: str | None = None
    #: What the maintainer can do next (set with the outcome).
    next_steps: str | None = None
    base_sha: str | None = None
    reproduction_source: Literal["issue", "config"] | None = None
    #: Why the issue's repro block was not used, when it was not.
    reproduction_note: str | None = None
    reproduced: bool | None = None
    #: Setup commands ran with network access (the repository's ``network: setup``).
    setup_network: bool = False
    verified: bool = False
    #: The repository's tests on the base commit, in a sentence (baseline runs).
    tests_on_base: str | None = None
    #: How the verified candidate's tests compare with the base's.
    tests_note: str | None = None
    contract: Contract | None = None
    limits: Limits = Field(default_factory=Limits)
    usage: Usage = Field(default_factory=Usage)
    branch: str | None = None
    #: The repository ``branch`` lives in: the proposal fork (``owner/name``);
    #: ``None``: the base repository (runs from before proposal forks, or the
    #: operator's opt-in).
    head_repo: str | None = None
    #: Every commit repairbot pushed to its branch, oldest first.
    pushed: list[str] = Field(default_factory=list)
    proposed_sha: str | None = None
    patch_sha: str | None = None
    agent_summary: str = ""
    pull: PullState | None = None
    approval: Approval | None = None
    merge_commit_sha: str | None = None
    #: The run confirms the fix on the merge commit after merging (runs that
    #: started before this phase existed do not, and their comment omits it).
    confirms_on_base: bool = False
    #: The draft pull request reverting the merge, when the fix did not hold there.
    revert: PullState | None = None
    branch_deleted: bool = False
    leftovers: list[str] = Field(default_factory=list)
    evidence: list[EvidenceItem] = Field(default_factory=list)

    def summary(self) -> RunSummary:
        """The state with the fields clients read most repeated at the top level."""
        return RunSummary.model_validate(
            dict(self)
            | {
                "attempts": self.usage.attempts,
                "pull_number": self.pull.number if self.pull else None,
                "pull_url": self.pull.url if self.pull else None,
            }
        )

    def add_evidence(self, label: str, ref: EvidenceRef | None) -> None:
        if ref is not None:
            self.evidence.append(EvidenceItem(label=label, ref=ref))


class RunSummary(RunState):
    """The repair run's result and its ``status`` query: the state, then the
    three fields clients read most. A subclass, so its JSON is the state's
    fields in order followed by these (what runs recorded as their result)."""

    attempts: int
    pull_number: int | None
    pull_url: str | None
