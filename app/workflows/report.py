"""What the repair run tells humans: the status comment, the pull request's
evidence summary and the check run. Pure functions of :class:`RunState`
(deterministic), so the words always match the state, the pull request's
true state included.
"""

from __future__ import annotations

from typing import Literal

from app.workflows.state import EvidenceItem, Outcome, RunState

PHASES = (
    ("accepted", "Accepted"),
    ("preparing", "Read the repository and its config"),
    ("reproducing", "Reproduce the bug on the base commit"),
    ("repairing", "Ask the agent for a fix and verify it"),
    ("publishing", "Push the branch and open a draft pull request"),
    ("awaiting-review", "Wait for an approving review of the exact commit"),
    ("merging", "Merge, pinned to the approved commit"),
)
#: Shown only for runs that confirm the fix on the merge commit (older runs'
#: comments keep their words: they are part of recorded histories).
CONFIRMING = ("confirming", "Confirm the fix on the merge commit")

#: How :func:`app.workflows.base_evidence.comparison_sentence` starts when the tests pass.
TESTS_GREEN = "Repository tests with the fix: pass."
RETRY = "Comment `/repair retry` to start a new run."

#: Headline and default next step per outcome.
OUTCOMES: dict[Outcome, tuple[str, str]] = {
    "merged": ("Merged the fix.", "Nothing to do."),
    "fix-not-confirmed": (
        "Merged, but the reproduction still fails on the merge commit.",
        "Review the revert pull request linked below: approve and merge it to take the "
        "change out, or close it and fix the bug by hand.",
    ),
    "not-triggered": ("Not started.", ""),
    "not-reproduced": (
        "Could not reproduce the bug: the reproduction passes on the base commit.",
        "Fix the reproduction (config `reproduce:` or the issue's repro block), then " + RETRY,
    ),
    "broken-reproduction": (
        "Stopped before any repair attempt: the reproduction command cannot run on the base "
        "commit (a config problem, not the bug).",
        "Fix the reproduction (config `reproduce:` or the issue's repro block), then " + RETRY,
    ),
    "budget-exhausted": (
        "Gave up: no candidate fix passed verification within the repair-attempt budget.",
        "Raise `budgets.repair_attempts` or give more detail in the issue, then " + RETRY,
    ),
    "time-budget-exhausted": (
        "Stopped: the run used up its time budget.",
        "Raise `budgets.total_seconds`, then " + RETRY,
    ),
    "cost-budget-exhausted": (
        "Stopped: the run used up its model token or cost budget.",
        "Raise `budgets.max_tokens` / `budgets.max_cost_usd`, then " + RETRY,
    ),
    "invalid-config": (
        "Stopped: the repository's repairbot config is invalid.",
        "Fix it, then " + RETRY,
    ),
    "no-reproduction": (
        "Stopped: there is no reproduction command.",
        "Add `reproduce:` to `.github/repairbot.yml` (or, as a maintainer, a fenced `repro` "
        "block to the issue), then " + RETRY,
    ),
    "closed-by-human": ("The pull request was closed by a human; the run ended.", RETRY),
    "merged-by-human": ("The pull request was merged by a human.", "Nothing to do."),
    "branch-deleted": ("The proposal's branch was deleted by someone; the run ended.", RETRY),
    "issue-closed": ("The issue was closed; the run ended.", "Reopen the issue, then " + RETRY),
    "review-timed-out": ("Nobody approved the proposed commit before the review deadline.", RETRY),
    "human-pushed": (
        "Stopped: a human pushed to the proposal's branch; repairbot only merges commits it "
        "proposed.",
        "Review and merge the pull request yourself, or close it and " + RETRY,
    ),
    "needs-human": ("Stopped: a human needs to decide (see below).", RETRY),
    "error": ("Stopped by an error repairbot could not get past (see below).", RETRY),
    "cancelled": ("Cancelled. Evidence is kept; owned resources were cleaned up.", RETRY),
    "cleanup-incomplete": (
        "Cancelled, but cleanup could not finish (see below).",
        "Remove what is listed below by hand.",
    ),
}

CheckConclusion = Literal["success", "failure", "cancelled", "neutral"]


def check_conclusion(state: RunState) -> CheckConclusion:
    """The completed check run's conclusion for the run's end."""
    outcome = state.outcome
    if outcome == "merged":
        return "success"
    if outcome == "fix-not-confirmed":
        return "failure"
    if outcome in ("cancelled", "cleanup-incomplete"):
        return "cancelled"
    if state.proposed_sha is None or outcome in (
        "closed-by-human",
        "merged-by-human",
        "review-timed-out",
        "issue-closed",
        "branch-deleted",
        "human-pushed",
    ):
        # Nothing of ours failed on this commit (or it is the base's commit).
        return "neutral"
    return "failure"


def phases_of(state: RunState) -> tuple[tuple[str, str], ...]:
    return (*PHASES, CONFIRMING) if state.confirms_on_base else PHASES


def _mark(current: str, phase: str, finished: bool, order: list[str]) -> str:
    if current not in order:
        return "✅" if finished else "·"
    if order.index(phase) < order.index(current) or (finished and phase == current):
        return "✅"
    return "⏳" if phase == current else "·"


def evidence_lines(evidence: list[EvidenceItem]) -> list[str]:
    return [
        f"- {item.label}: `{item.ref.sha256[:12]}` ({item.ref.size} bytes)" for item in evidence
    ]


def pull_line(state: RunState) -> str | None:
    """The pull request's true state, in words (never "none opened" while one is)."""
    pull = state.pull
    if pull is None:
        return "No pull request was opened." if state.outcome else None
    shown = {"open": "open", "closed": "closed (not merged)", "merged": "merged"}[pull.state]
    return f"Pull request: #{pull.number} ({shown}) {pull.url}".rstrip()


def budget_lines(state: RunState) -> list[str]:
    limits, usage = state.limits, state.usage
    lines = [
        f"Repair attempts: {usage.attempts} of {limits.repair_attempts}",
        f"Agent tool retries: {usage.tool_retries} (up to {limits.tool_retries} per attempt)",
        f"Working time: {usage.work_seconds:.0f}s of {limits.total_seconds:.0f}s",
    ]
    if usage.agent_interruptions:
        lines.insert(
            2,
            f"Agent interrupted by a worker crash: {usage.agent_interruptions} time(s); "
            "resumed on another worker (not a tool retry)",
        )
    tokens = f"Model tokens: {usage.tokens}"
    if limits.max_tokens is not None:
        tokens += f" of {limits.max_tokens}"
    cost = f"cost ${usage.cost_usd:.4f}"
    if limits.max_cost_usd is not None:
        cost += f" of ${limits.max_cost_usd:.2f}"
    lines.append(f"{tokens}; {cost}")
    if usage.turns or usage.tool_calls:
        lines.append(f"Agent model turns: {usage.turns}; tool calls: {usage.tool_calls}")
    return lines


def test_lines(state: RunState) -> list[str]:
    """The repository's tests on the base, and with the fix (baseline-aware runs)."""
    return [line for line in (state.tests_on_base, state.tests_note) if line]


def headline(state: RunState) -> str:
    if state.outcome is None:
        return "working on it"
    return OUTCOMES[state.outcome][0]


def status_comment(state: RunState) -> str:
    """The one status comment per run, rewritten in place at every phase."""
    lines = [f"### 🔧 repairbot: {headline(state)}", ""]
    lines.append(f"Run `{state.run_id}` · policy `{state.policy_version}`")
    if state.base_sha:
        lines.append(f"Base: `{state.base_branch}` at `{state.base_sha[:12]}`")
    if state.reproduction_source:
        source = (
            "the issue's repro block"
            if state.reproduction_source == "issue"
            else ("the repository's configured `reproduce` command")
        )
        lines.append(f"Reproduction: {source}.")
    if state.reproduction_note:
        lines.append(state.reproduction_note)
    lines.append("")
    phases = phases_of(state)
    order = [p for p, _ in phases]
    for phase, title in phases:
        mark = _mark(state.phase, phase, state.outcome == "merged", order)
        lines.append(f"- {mark} {title}")
    lines.append("")
    lines.extend(budget_lines(state))
    pull = pull_line(state)
    if pull:
        lines.append(pull)
    if state.revert is not None:
        lines.append(f"Revert proposal: #{state.revert.number} (draft) {state.revert.url}".rstrip())
    if state.branch:
        gone = " (deleted)" if state.branch_deleted else ""
        where = f"`{state.head_repo}:{state.branch}`" if state.head_repo else f"`{state.branch}`"
        lines.append(f"Branch: {where}{gone}")
    if state.proposed_sha:
        lines.append(f"Proposed commit: `{state.proposed_sha}`")
    lines.extend(test_lines(state))
    if state.setup_network:
        lines.append(
            "Setup commands ran with network access (`network: setup` in "
            "`.github/repairbot.yml`); every other command ran without network."
        )
    if state.detail:
        lines.extend(["", state.detail])
    if state.leftovers:
        lines.extend(["", "Left behind:", *[f"- {item}" for item in state.leftovers]])
    if state.outcome is not None:
        step = state.next_steps if state.next_steps is not None else OUTCOMES[state.outcome][1]
        if step:
            lines.extend(["", f"**What you can do:** {step}"])
    if state.evidence:
        lines.extend(["", "<details><summary>Evidence (sha256)</summary>", ""])
        lines.extend(evidence_lines(state.evidence))
        lines.extend(["", "</details>"])
    return "\n".join(lines)


def pull_request_body(state: RunState) -> str:
    """The draft pull request's evidence summary."""
    base = (state.base_sha or "")[:12]
    lines = [
        f"Fixes #{state.issue_number} (proposed by repairbot; a human approval of this "
        "exact commit is required before it merges).",
        "",
        "| evidence | result |",
        "| --- | --- |",
        f"| reproduction on the base commit `{base}` | "
        f"{'fails, as the issue says' if state.reproduced else 'n/a'} |",
        f"| reproduction with this fix | {'passes' if state.verified else '-'} |",
        f"| repository tests with this fix | {_tests_cell(state)} |",
        f"| patch sha256 | `{state.patch_sha or ''}` |",
        f"| repair attempts | {state.usage.attempts} |",
    ]
    if state.agent_summary:
        lines.extend(["", "**Agent's summary**", "", state.agent_summary[:2000]])
    if state.evidence:
        lines.extend(["", "<details><summary>Evidence (sha256)</summary>", ""])
        lines.extend(evidence_lines(state.evidence))
        lines.extend(["", "</details>"])
    return "\n".join(lines)


def _tests_cell(state: RunState) -> str:
    if not state.verified:
        return "-"
    return state.tests_note or "pass"


def check_title(state: RunState) -> str:
    if state.outcome is None:
        tests = "tests pass"
        if state.tests_note and not state.tests_note.startswith(TESTS_GREEN):
            tests = "no test that passes on the base fails"
        return f"Verified: reproduction passes, {tests}; waiting for an approving review"
    return headline(state)


def check_summary(state: RunState) -> str:
    """The completed check run: what happened and what to do next."""
    return status_comment(state)
