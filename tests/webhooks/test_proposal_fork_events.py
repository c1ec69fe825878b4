"""Which pull requests may steer a run: those from the base repository and
from the proposal account's fork; never a stranger's fork, whatever its
branch is called (pull_request and pull_request_review handlers)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from webhook_examples import load_example

from app.webhooks.events import PullRequestEvent, parse_event

PROPOSALS = "acme-repairbot"


def event_from(head_repo: dict[str, Any] | None) -> PullRequestEvent:
    payload = load_example("pull_request", "synchronize")
    pull = payload["pull_request"]
    pull["head"]["ref"] = "repairbot/issue-1"
    pull["head"]["repo"] = head_repo
    parsed = parse_event("pull_request", json.dumps(payload).encode())
    assert isinstance(parsed, PullRequestEvent)
    return parsed


def base_repo() -> dict[str, Any]:
    return dict(load_example("pull_request", "synchronize")["pull_request"]["base"]["repo"])


def fork_of(owner: str) -> dict[str, Any]:
    return base_repo() | {"id": 987_654, "full_name": f"{owner}/slugify", "fork": True}


@pytest.mark.parametrize(
    ("head_repo", "proposal_owner", "steers"),
    [
        (base_repo(), "", True),  # the base repository itself (opt-in, older runs)
        (base_repo(), PROPOSALS, True),
        (fork_of(PROPOSALS), PROPOSALS, True),
        (fork_of(PROPOSALS.upper()), PROPOSALS, True),  # GitHub logins ignore case
        (fork_of("mallory"), PROPOSALS, False),  # a stranger's fork
        (fork_of(PROPOSALS), "", False),  # no proposal account configured
        (fork_of(f"{PROPOSALS}-evil"), PROPOSALS, False),
        (None, PROPOSALS, False),  # the head repository was deleted
    ],
)
def test_only_the_proposal_accounts_fork_steers_a_run(
    head_repo: dict[str, Any] | None, proposal_owner: str, steers: bool
) -> None:
    pull = event_from(head_repo).pull_request
    assert pull.from_run_branch_home(proposal_owner) is steers
