"""Names and ids that tie GitHub objects to runs, shared by handlers and workflows.

Ids are derived, never generated: the same issue always maps to the same
workflow id, so a relabel or a redelivered webhook cannot start a second run.
"""

from __future__ import annotations

import re

REPAIR_WORKFLOW = "repair"
COMMAND_WORKFLOW = "slash-command"
BRANCH_PREFIX = "repairbot/issue-"
_BRANCH = re.compile(r"^repairbot/issue-(\d+)$")


def repair_workflow_id(repo_full_name: str, issue_number: int) -> str:
    return f"repair:{repo_full_name.lower()}#{issue_number}"


def command_workflow_id(delivery_id: str) -> str:
    return f"command:{delivery_id}"


def repair_branch(issue_number: int) -> str:
    return f"{BRANCH_PREFIX}{issue_number}"


def issue_of_branch(branch: str) -> int | None:
    """The issue a repairbot branch belongs to, or None for anyone else's branch."""
    match = _BRANCH.match(branch)
    return int(match.group(1)) if match else None
