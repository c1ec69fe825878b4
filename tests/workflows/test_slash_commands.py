"""The slash-command workflow on the kit: who may command, what each verb
does to the issue's repair run, what the reply says. The parsing of comments
is tests/webhooks/test_slash_commands.py's; the whole path over webhooks is
tests/e2e/test_slash_commands.py's."""

from __future__ import annotations

from typing import Any

from app.engine.testing import Call, FakeActivities, WorkflowEnvironment
from app.main.catalog import build_registry
from tests.workflows.repair_scenario import REQUEST, WORKFLOW_ID

COMMENT_ID = 900001
COMMAND_ID = f"command:{COMMENT_ID}"
REPLY = {"id": 600009, "url": "", "created": True}


def command(verb: str, *, author: str = "maya", args: str = "") -> dict[str, Any]:
    """The workflow's input, as handlers/issue_comment.py starts it."""
    return {
        "command": {"verb": verb, "args": args},
        "author": author,
        "comment_id": COMMENT_ID,
        "request": REQUEST,
    }


def permissions(**by_user: str) -> Any:
    def permission(call: Call) -> dict[str, str]:
        return {"permission": by_user.get(call.input["user"], "write")}

    return permission


async def run_command(fakes: FakeActivities, url: str, verb: str, **kwargs: Any) -> Any:
    fakes.on("github.comment", REPLY)
    async with WorkflowEnvironment.start(build_registry(), fakes, database_url=url) as env:
        await env.start_workflow("slash-command", COMMAND_ID, command(verb, **kwargs))
        return await env.wait_status(COMMAND_ID)


def reply(fakes: FakeActivities) -> str:
    [comment] = fakes.inputs("github.comment")
    return str(comment["body"])


async def test_cancel_from_a_maintainer_cancels_the_issues_run(kit_db_url: str) -> None:
    fakes = (
        FakeActivities()
        .on("github.permission", permissions())
        .on("runs.cancel_repair", {"cancelled": True})
    )
    run = await run_command(fakes, kit_db_url, "cancel")
    assert run.result == {"verb": "cancel", "obeyed": True}
    [cancel] = fakes.inputs("runs.cancel_repair")
    assert cancel["reason"] == "@maya asked to cancel"
    assert cancel["request"]["issue_number"] == REQUEST["issue_number"]
    assert reply(fakes).startswith("@maya Cancelling the repair run")


async def test_a_readers_command_is_refused_once_and_does_nothing(kit_db_url: str) -> None:
    fakes = FakeActivities().on("github.permission", permissions(rita="read"))
    run = await run_command(fakes, kit_db_url, "cancel", author="rita")
    assert run.result == {"verb": "cancel", "obeyed": False, "permission": "read"}
    assert [c.activity for c in fakes.calls] == ["github.permission", "github.comment"]
    assert "Sorry @rita" in reply(fakes)
    # Its marker names the issue, not this command's run: the comment activity
    # finds an earlier refusal by it, so a reader is refused once per issue.
    [refusal] = fakes.inputs("github.comment")
    assert refusal["op_run"] == f"refusal:{REQUEST['repo']}#{REQUEST['issue_number']}"


async def test_status_describes_the_run_and_its_phase(kit_db_url: str) -> None:
    described = {
        "exists": True,
        "run_id": f"{WORKFLOW_ID}/1",
        "status": "running",
        "phase": {"phase": "awaiting-review"},
    }
    fakes = (
        FakeActivities()
        .on("github.permission", permissions())
        .on("runs.describe_repair", described)
    )
    await run_command(fakes, kit_db_url, "status")
    text = reply(fakes)
    assert f"Repair run `{WORKFLOW_ID}/1` is **running**." in text
    assert "Current phase: awaiting-review." in text


async def test_retry_while_the_run_is_active_starts_nothing(kit_db_url: str) -> None:
    fakes = (
        FakeActivities()
        .on("github.permission", permissions())
        .on("runs.retry_repair", {"run_id": f"{WORKFLOW_ID}/1", "created": False})
    )
    await run_command(fakes, kit_db_url, "retry")
    assert [c["author"] for c in fakes.inputs("runs.retry_repair")] == ["maya"]
    assert "is still active; nothing to retry" in reply(fakes)


async def test_an_unknown_verb_gets_the_help(kit_db_url: str) -> None:
    fakes = FakeActivities().on("github.permission", permissions())
    await run_command(fakes, kit_db_url, "unknown", args="frobnicate")
    text = reply(fakes)
    assert "I don't know `/repair frobnicate`." in text
    assert "/repair cancel" in text  # the help follows
    assert fakes.unexpected == []
