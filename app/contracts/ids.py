"""Names and ids that tie GitHub objects to runs, shared by handlers and workflows.

Ids are derived, never generated: the same issue always maps to the same
workflow id, so a relabel or a redelivered webhook cannot start a second run.
"""

from __future__ import annotations

import re

REPAIR_WORKFLOW = "repair"
SLASH_COMMAND_WORKFLOW = "slash-command"
LABEL_TRIAGE_WORKFLOW = "label-triage"
CLOSE_TRIAGE_WORKFLOW = "close-triage"
BRANCH_PREFIX = "repairbot/issue-"
#: ``repairbot/issue-<n>`` (a run's first try) or ``repairbot/issue-<n>-<run>``.
_BRANCH = re.compile(r"^repairbot/issue-(\d+)(?:-\d+)?$")


def repair_workflow_id(repo_id: int, issue_number: int) -> str:
    """The issue's repair runs, keyed by the repository's id: GitHub keeps the
    id through renames and transfers, while ``full_name`` changes with them (a
    name key started a second run after a rename and lost the first one's
    review events)."""
    return f"repair:{repo_id}#{issue_number}"


def legacy_repair_workflow_id(repo_full_name: str, issue_number: int) -> str:
    """The name key of runs started before repository ids were recorded (the
    0009 migration re-keyed every run whose input has the id)."""
    return f"repair:{repo_full_name.lower()}#{issue_number}"


def repair_workflow_ids(repo_id: int, repo_full_name: str, issue_number: int) -> tuple[str, ...]:
    """Where an event about this issue may find its run: the id key first,
    then the legacy name key, so an old run keeps receiving its events."""
    return (
        repair_workflow_id(repo_id, issue_number),
        legacy_repair_workflow_id(repo_full_name, issue_number),
    )


def request_workflow_id(repo_id: int | None, repo_full_name: str, issue_number: int) -> str:
    """The workflow id a run request belongs to (a request recorded before
    requests carried the repository id falls back to the name key)."""
    if repo_id is None:
        return legacy_repair_workflow_id(repo_full_name, issue_number)
    return repair_workflow_id(repo_id, issue_number)


def slash_command_workflow_id(comment_id: int | str) -> str:
    """Keyed by the comment: the same comment, however often delivered, is one command."""
    return f"command:{comment_id}"


def triage_workflow_id(delivery_id: str) -> str:
    """Keyed by the delivery: a redelivered label or close is one triage."""
    return f"triage:{delivery_id}"


def repair_branch(issue_number: int) -> str:
    return f"{BRANCH_PREFIX}{issue_number}"


def run_branch(issue_number: int, run_id: str) -> str:
    """The branch of one run. A run's number is the last part of its id
    (``<workflow id>/<n>``): a retry or relabel gets a branch of its own, so it
    works whether or not an older run's branch exists and never overwrites it."""
    number = run_id.rsplit("/", 1)[-1]
    if not number.isdigit() or number == "1":
        return repair_branch(issue_number)
    return f"{repair_branch(issue_number)}-{number}"


def issue_of_branch(branch: str) -> int | None:
    """The issue a repairbot branch belongs to, or None for anyone else's branch."""
    match = _BRANCH.match(branch)
    return int(match.group(1)) if match else None


def head_owner(head_repo: str | None) -> str | None:
    """The account whose fork holds a run's branch (``None``: the base repository)."""
    return head_repo.partition("/")[0] if head_repo else None
