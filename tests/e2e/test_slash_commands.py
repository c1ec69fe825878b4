"""Slash commands through real webhooks: obeyed from people with write access,
refused once, politely, for everyone else. State is read from the emulator."""

from __future__ import annotations

from typing import Any

from app.demo.stack import LocalStack


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
    assert run.result == {"verb": "help", "obeyed": True}
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
