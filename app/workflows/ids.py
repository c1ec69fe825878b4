"""Names and ids that tie GitHub objects to runs, shared by handlers and workflows.

Ids are derived, never generated: the same issue always maps to the same
workflow id, so a relabel or a redelivered webhook cannot start a second run.
"""

from __future__ import annotations

import re

REPAIR_WORKFLOW = "repair"
COMMAND_WORKFLOW = "slash-command"
BRANCH_PREFIX = "repairbot/issue-"
#: ``repairbot/issue-<n>`` (a run's first try) or ``repairbot/issue-<n>-<run>``.
_BRANCH = re.compile(r"^repairbot/issue-(\d+)(?:-\d+)?$")


def repair_workflow_id(repo_full_name: str, issue_number: int) -> str:
    return f"repair:{repo_full_name.lower()}#{issue_number}"


def command_workflow_id(comment_id: int | str) -> str:
    """Keyed by the comment: the same comment, however often delivered, is one command."""
    return f"command:{comment_id}"


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
