"""A label from a bot is checked against the repository's allow-list before
the run clones anything (issue 19): a refused bot costs one contents read,
no workspace and no git fetch."""

from __future__ import annotations

from typing import Any

import pytest

from app.demo.project import fix_agent_command
from app.demo.stack import LocalStack
from tests.e2e.scenario import activity_results, scheduled, wait_end, wait_for, workflow_id
from tests.e2e.test_steering import post_signed, seed  # noqa: F401  (the seed fixture)

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
BOT = "ci-helper[bot]"


async def _label_as_bot(stack: LocalStack) -> int:
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title="Slugs", body="Broken."
    )
    repository = await stack.gh.rest(
        "GET", f"/repos/{people.owner}/{stack.repo_name}", as_user=people.owner
    )
    payload: dict[str, Any] = {
        "action": "labeled",
        "issue": issue,
        "label": {"id": 1, "name": "repairbot"},
        "repository": repository,
        "sender": {"login": BOT, "id": 777, "type": "Bot"},
        "installation": {"id": stack.installation_id},
    }
    response = await post_signed(stack, "issues", payload)
    assert response.status_code == 202, response.text
    return int(issue["number"])


def _workspaces(stack: LocalStack) -> list[str]:
    assert stack.settings is not None
    root = stack.settings.workspaces_dir
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


@SQLITE_ONLY
@pytest.mark.fast
async def test_a_bot_not_on_the_allow_list_is_refused_before_any_clone(
    stack: LocalStack,
) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await _label_as_bot(stack)
    run = await wait_end(stack, number, timeout=90)
    assert run.result["outcome"] == "not-triggered", run.result
    assert "allow-list" in run.result["detail"]
    assert activity_results(stack, number, "github.trigger_config") == [
        {"valid": True, "trigger_label": "repairbot", "allowed_bots": []}
    ]
    assert scheduled(stack, number, "workspace.prepare") == []
    assert scheduled(stack, number, "github.branch_head") == []
    assert _workspaces(stack) == []


@SQLITE_ONLY
@pytest.mark.parametrize("seed", [f'allowed_bots: ["{BOT}"]\n'], indirect=True)
async def test_an_allow_listed_bot_goes_on_to_prepare(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await _label_as_bot(stack)

    def prepared() -> bool:
        assert stack.runtime is not None
        found = stack.runtime.store.find_run(workflow_id(stack, number))
        return found is not None and bool(scheduled(stack, number, "workspace.prepare"))

    await wait_for("the allow-listed bot's run prepares its workspace", prepared, timeout=90)
    assert activity_results(stack, number, "github.trigger_config")[0]["allowed_bots"] == [BOT]
