"""Frozen for version 1 of the repair workflow (its texts are hashed into
recorded activity inputs). What the repair run tells humans: the status
comment and the pull request's evidence summary. Pure functions of the run's
state (deterministic)."""

from __future__ import annotations

from typing import Any

PHASES = (
    ("accepted", "Accepted"),
    ("preparing", "Read the repository and its config"),
    ("reproducing", "Reproduce the bug on the base commit"),
    ("repairing", "Ask the agent for a fix and verify it"),
    ("publishing", "Push the branch and open a draft pull request"),
    ("awaiting-review", "Wait for an approving review of the exact commit"),
    ("merging", "Merge, pinned to the approved commit"),
)
OUTCOMES = {
    "merged": "Merged the fix.",
    "not-reproduced": "Could not reproduce the bug: the reproduction passes on the base commit, "
    "so there is nothing to fix. No pull request was opened.",
    "budget-exhausted": "Gave up: no candidate fix passed verification within the repair-attempt "
    "budget. No pull request was opened.",
    "invalid-config": "Stopped: the repository's repairbot config is invalid.",
    "no-reproduction": "Stopped: there is no reproduction command (add `reproduce:` to "
    "`.github/repairbot.yml` or a fenced `repro` block to the issue).",
    "closed-by-human": "The pull request was closed by a human; the run ended.",
    "merged-by-human": "The pull request was merged by a human.",
    "review-timed-out": "Nobody approved the proposed commit before the review deadline; "
    "the run ended. Comment `/repair retry` to start again.",
    "time-budget-exhausted": "Stopped: the run used up its time budget.",
    "needs-human": "Stopped: a human needs to decide (see below). Comment `/repair retry` "
    "to start again.",
    "cancelled": "Cancelled. Evidence is kept; owned resources were cleaned up.",
    "cleanup-incomplete": "Cancelled, but cleanup could not finish (see below).",
}


def _mark(current: str, phase: str, finished: bool) -> str:
    order = [p for p, _ in PHASES]
    if current not in order:
        return "✅" if finished else "·"
    if order.index(phase) < order.index(current) or (finished and phase == current):
        return "✅"
    return "⏳" if phase == current else "·"


def evidence_lines(evidence: list[dict[str, Any]]) -> list[str]:
    return [
        f"- {item['label']}: `{item['ref']['sha256'][:12]}` ({item['ref']['size']} bytes)"
        for item in evidence
    ]


def status_comment(state: dict[str, Any]) -> str:
    """The one status comment per run, rewritten in place at every phase."""
    outcome = state.get("outcome")
    headline = OUTCOMES.get(outcome, outcome) if outcome else "working on it"
    lines = [f"### 🔧 repairbot: {headline}"]
    lines.append("")
    lines.append(f"Run `{state['run_id']}` · policy `{state['policy_version']}`")
    if state.get("base_sha"):
        lines.append(f"Base: `{state['base_branch']}` at `{state['base_sha'][:12]}`")
    lines.append("")
    for phase, title in PHASES:
        lines.append(f"- {_mark(state['phase'], phase, outcome == 'merged')} {title}")
    if state.get("attempts"):
        lines.append("")
        lines.append(f"Repair attempts: {state['attempts']} of {state.get('attempt_budget', '?')}")
    if state.get("pull_url"):
        lines.append(f"Pull request: {state['pull_url']}")
    if state.get("proposed_sha"):
        lines.append(f"Proposed commit: `{state['proposed_sha']}`")
    if state.get("detail"):
        lines.extend(["", str(state["detail"])])
    if state.get("evidence"):
        lines.extend(["", "<details><summary>Evidence (sha256)</summary>", ""])
        lines.extend(evidence_lines(state["evidence"]))
        lines.extend(["", "</details>"])
    return "\n".join(lines)


def pull_request_body(state: dict[str, Any]) -> str:
    """The draft pull request's evidence summary."""
    verify = state.get("verification") or {}
    repro = state.get("reproduction") or {}
    verified = verify.get("verdict") == "verified"
    lines = [
        f"Fixes #{state['issue_number']} (proposed by repairbot; a human approval of this "
        "exact commit is required before it merges).",
        "",
        "| evidence | result |",
        "| --- | --- |",
        f"| reproduction on the base commit `{state['base_sha'][:12]}` | "
        f"{'fails, as the issue says' if repro.get('reproduced') else 'n/a'} |",
        f"| reproduction with this fix | {'passes' if verified else '-'} |",
        f"| repository tests with this fix | {'pass' if verified else '-'} |",
        f"| patch sha256 | `{state.get('patch_sha', '')}` |",
        f"| repair attempts | {state.get('attempts', 0)} |",
    ]
    if state.get("agent_summary"):
        lines.extend(["", "**Agent's summary**", "", str(state["agent_summary"])[:2000]])
    if state.get("evidence"):
        lines.extend(["", "<details><summary>Evidence (sha256)</summary>", ""])
        lines.extend(evidence_lines(state["evidence"]))
        lines.extend(["", "</details>"])
    return "\n".join(lines)
