"""Slash commands through real webhooks: obeyed from people with write access,
refused once, politely, for everyone else. State is read from the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.contracts.ids import slash_command_workflow_id
from app.demo.project import ISSUE_BODY, ISSUE_TITLE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from tests.e2e.scenario import review, wait_end, wait_phase, workflow_id


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    """The demo repository (its reproduction and the fix agent's fix)."""
    return write_project(tmp_path / "project")


async def _issue_comments(stack: LocalStack, number: int) -> list[dict[str, Any]]:
    comments: list[dict[str, Any]] = await stack.gh.rest(
        "GET",
        f"/repos/{stack.repo}/issues/{number}/comments",
        as_user=stack.people.owner,
    )
    return comments


async def _settle(stack: LocalStack, workflow_id: str) -> Any:
    assert stack.runtime is not None
    await stack.gh.deliveries.wait()
    return await stack.runtime.wait_for(workflow_id, timeout=30)


async def test_help_from_a_maintainer_is_answered(stack: LocalStack) -> None:
    stack.start_repairbot()
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title="Bug", body="body"
    )
    number = issue["number"]
    await stack.gh.comment(
        people.owner, stack.repo_name, number, "/repair help", as_user=people.maintainer
    )
    await stack.gh.deliveries.wait()
    assert stack.runtime is not None
    runs = stack.runtime.store.list_runs(status=None)
    [command] = [r for r in runs if r.workflow_name == "slash-command"]
    run = await stack.runtime.wait_for(command.run_id, timeout=30)
    assert run.status == "completed", run.error
    assert run.result == {"verb": "help", "obeyed": True, "permission": None}
    bodies = [c["body"] for c in await _issue_comments(stack, number)]
    replies = [b for b in bodies if b.startswith(f"@{people.maintainer}")]
    assert len(replies) == 1 and "/repair cancel" in replies[0]


async def test_commands_from_readers_get_one_polite_refusal(stack: LocalStack) -> None:
    stack.start_repairbot()
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title="Bug", body="body"
    )
    number = issue["number"]
    for text in ("/repair", "/repair status"):
        await stack.gh.comment(people.owner, stack.repo_name, number, text, as_user=people.reader)
        await stack.gh.deliveries.wait()
        assert stack.runtime is not None
        for run in stack.runtime.store.list_runs():
            await stack.runtime.wait_for(run.run_id, timeout=30)
    assert stack.runtime is not None
    results = [
        r.result for r in stack.runtime.store.list_runs() if r.workflow_name == "slash-command"
    ]
    assert results and all(r["obeyed"] is False and r["permission"] == "read" for r in results)
    assert [r for r in stack.runtime.store.list_runs() if r.workflow_name == "repair"] == []
    refusals = [
        c for c in await _issue_comments(stack, number) if c["body"].startswith("Sorry @rick")
    ]
    assert len(refusals) == 1


@pytest.mark.fast
async def test_repair_status_cancel_and_retry_from_a_maintainer(stack: LocalStack) -> None:
    """``/repair`` starts the issue's run, ``/repair status`` describes it,
    ``/repair retry`` starts a fresh run once it ended; each is answered once."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
    )
    number = issue["number"]

    async def command(text: str) -> str:
        made = await stack.gh.comment(
            people.owner, stack.repo_name, number, text, as_user=people.maintainer
        )
        run = await _settle(stack, slash_command_workflow_id(made["id"]))
        assert run.status == "completed" and run.result["obeyed"] is True, run.result
        replies = [
            c["body"]
            for c in await _issue_comments(stack, number)
            if c["body"].startswith(f"@{people.maintainer}")
        ]
        return replies[-1]

    started = await command("/repair")
    first = stack.runtime.store.find_run(workflow_id(stack, number))
    assert first is not None and first.input["trigger"] == "comment"
    assert f"Started repair run `{first.run_id}`" in started
    await wait_phase(stack, number, "awaiting-review")
    status = await command("/repair status")
    assert f"Repair run `{first.run_id}` is **running**" in status
    assert "awaiting-review" in status
    assert "nothing to retry" in await command("/repair retry")
    await command("/repair cancel")
    ended = await wait_end(stack, number)
    assert ended.run_id == first.run_id and ended.result["outcome"] == "cancelled"
    retried = await command("/repair retry")
    second = stack.runtime.store.find_run(workflow_id(stack, number))
    assert second is not None and second.run_id != first.run_id
    assert f"Started a new repair run `{second.run_id}`" in retried
    await wait_phase(stack, number, "awaiting-review")


async def test_retry_after_a_merged_run_is_refused_with_a_reason(stack: LocalStack) -> None:
    """Issue 20: the fix is on the base branch, so ``/repair retry`` starts
    nothing and says why (the dashboard offers no Retry there either)."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    assert stack.runtime is not None
    people = stack.people
    issue = await stack.gh.create_issue(
        people.owner, stack.repo_name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
    )
    number = issue["number"]
    await stack.gh.comment(people.owner, stack.repo_name, number, "/repair", as_user=people.owner)
    status = await wait_phase(stack, number, "awaiting-review")
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    merged = await wait_end(stack, number)
    assert merged.result["outcome"] == "merged", merged.result
    made = await stack.gh.comment(
        people.owner, stack.repo_name, number, "/repair retry", as_user=people.maintainer
    )
    run = await _settle(stack, slash_command_workflow_id(made["id"]))
    assert run.status == "completed" and run.result["obeyed"] is True, run.result
    replies = [
        c["body"]
        for c in await _issue_comments(stack, number)
        if c["body"].startswith(f"@{people.maintainer}")
    ]
    assert len(replies) == 1
    assert f"Run `{merged.run_id}` merged its fix, so there is nothing to retry" in replies[0]
    latest = stack.runtime.store.find_run(workflow_id(stack, number))
    assert latest is not None and latest.run_id == merged.run_id
