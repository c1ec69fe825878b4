"""The slash-command workflow on the kit: who may command, what each verb
does to the issue's repair run, what the reply says. Version 3 acts on the
real repair run (started with the recorded merge's answers) through the
engine's run commands; version 2, still registered for the runs recorded
with it, through the ``runs.*`` activities. The parsing of comments is
tests/webhooks/test_slash_commands.py's; the whole path over webhooks is
tests/e2e/test_slash_commands.py's."""

from __future__ import annotations

from typing import Any

from app.contracts.ids import request_workflow_id
from app.engine.testing import Call, FakeActivities, RunStuck, WorkflowEnvironment
from app.main.catalog import build_registry
from tests.workflows.repair_scenario import (
    REQUEST,
    Held,
    merged_fakes,
    recorded_result,
    review,
    review_key,
)

COMMENT_ID = 900001
COMMAND_ID = f"command:{COMMENT_ID}"
REPLY = {"id": 600009, "url": "", "created": True}
#: The issue's repair runs, under the id the commands address them by.
WORKFLOW_ID = request_workflow_id(REQUEST["repo_id"], REQUEST["repo"], REQUEST["issue_number"])


async def start_repair(env: WorkflowEnvironment) -> str:
    return await env.start_workflow("repair", WORKFLOW_ID, REQUEST)


async def approve(env: WorkflowEnvironment) -> None:
    payload = review()
    await env.signal(WORKFLOW_ID, "review", payload, dedupe_key=review_key(payload))


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


def kit(fakes: FakeActivities, url: str) -> Any:
    return WorkflowEnvironment.start(build_registry(), fakes, database_url=url)


async def obey(env: WorkflowEnvironment, verb: str, **kwargs: Any) -> Any:
    """Run one command to its end (moving the clock while it waits for a run
    that cleans up) and return its run."""
    run_id = await env.start_workflow("slash-command", COMMAND_ID, command(verb, **kwargs))
    while True:
        try:
            return await env.wait_status(run_id)
        except RunStuck:  # quiet: it waits on its timer
            await env.advance(60)


def reply(fakes: FakeActivities) -> str:
    """The command's answer on the issue (the repair run comments too)."""
    [comment] = [c for c in fakes.inputs("github.comment") if c["op_step"] in ("reply", "maya")]
    return str(comment["body"])


def commanding_fakes() -> FakeActivities:
    """The recorded merge's answers, everyone a writer."""
    return merged_fakes().on("github.permission", permissions())


async def held_repair(env: WorkflowEnvironment, fakes: FakeActivities) -> Held:
    """The issue's repair run, in flight in its repairing phase."""
    held = Held(then=recorded_result("agent.propose_fix"))
    fakes.on("agent.propose_fix", held)
    await start_repair(env)
    await env.wait_phase(WORKFLOW_ID, "repairing")
    await env.wait_called("agent.propose_fix")
    return held


async def test_cancel_from_a_maintainer_cancels_the_issues_run(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        run = await obey(env, "cancel")
        repair = await env.run(WORKFLOW_ID)
        asked = [e.data for e in await env.history(repair.run_id) if e.type == "cancel_requested"]
        held.release(recorded_result("agent.propose_fix"))
        await env.wait_status(WORKFLOW_ID)
    assert run.result == {"verb": "cancel", "obeyed": True, "permission": None}
    assert asked == [{"reason": "@maya asked to cancel", "by": f"run {run.run_id}"}]
    assert reply(fakes).startswith("@maya Cancelling the repair run")


async def test_cancel_without_a_run_says_so(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        await obey(env, "cancel")
    assert reply(fakes) == "@maya There is no active repair run to cancel."


async def test_a_readers_command_is_refused_once_and_does_nothing(kit_db_url: str) -> None:
    fakes = (
        FakeActivities()
        .on("github.permission", permissions(rita="read"))
        .on("github.comment", REPLY)
    )
    async with kit(fakes, kit_db_url) as env:
        run = await obey(env, "cancel", author="rita")
    assert run.result == {"verb": "cancel", "obeyed": False, "permission": "read"}
    assert [c.activity for c in fakes.calls] == ["github.permission", "github.comment"]
    [refusal] = fakes.inputs("github.comment")
    assert "Sorry @rita" in refusal["body"]
    # Its marker names the issue, not this command's run: the comment activity
    # finds an earlier refusal by it, so a reader is refused once per issue.
    assert refusal["op_run"] == f"refusal:{REQUEST['repo']}#{REQUEST['issue_number']}"


async def test_status_describes_the_run_and_its_phase(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        await obey(env, "status")
        held.release(recorded_result("agent.propose_fix"))
    text = reply(fakes)
    assert f"Repair run `{WORKFLOW_ID}/1` is **running**." in text
    assert "Current phase: repairing." in text


async def test_repair_starts_the_issues_run_once(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        await obey(env, "repair")
        held.release(recorded_result("agent.propose_fix"))
    assert reply(fakes) == (
        f"@maya A repair run is already active for this issue: `{WORKFLOW_ID}/1`."
    )


async def test_retry_while_the_run_is_active_starts_nothing(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        await obey(env, "retry")
        held.release(recorded_result("agent.propose_fix"))
    assert f"Run `{WORKFLOW_ID}/1` is still active; nothing to retry" in reply(fakes)


async def test_retry_after_a_merged_fix_is_refused(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        await approve(env)
        merged = await env.wait_status(WORKFLOW_ID)
        await obey(env, "retry")
        runs = [
            r for r in await env.runtime.read(env.store.list_runs) if r.workflow_name == "repair"
        ]
    assert merged.result["outcome"] == "merged", merged.result
    assert f"Run `{WORKFLOW_ID}/1` merged its fix, so there is nothing to retry" in reply(fakes)
    assert len(runs) == 1


async def test_retry_of_a_parked_run_cancels_it_then_starts_a_new_one(kit_db_url: str) -> None:
    """GitHub refuses the merge: the run parks for an operator. A retry asks it
    to cancel (its cleanup runs), waits for it to end, and starts the next."""
    refused = {"outcome": "not-allowed", "reason": "branch protection"}
    fakes = commanding_fakes().on("github.merge", refused)
    async with kit(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        await approve(env)
        parked = await env.wait_status(WORKFLOW_ID)
        await obey(env, "retry")
        old = await env.run(parked.run_id)
        cancels = [e.data for e in await env.history(parked.run_id) if e.type == "cancel_requested"]
    assert parked.status == "needs-human", (parked.status, parked.error)
    assert old.status in ("cancelled", "cleanup-incomplete")  # it ended, then the next started
    assert cancels[0]["reason"] == "retried by @maya"
    assert reply(fakes) == f"@maya Started a new repair run `{WORKFLOW_ID}/2`."


async def test_an_unknown_verb_gets_the_help(kit_db_url: str) -> None:
    fakes = commanding_fakes()
    async with kit(fakes, kit_db_url) as env:
        await obey(env, "unknown", args="frobnicate")
    text = reply(fakes)
    assert "I don't know `/repair frobnicate`." in text
    assert "/repair cancel" in text  # the help follows
    assert fakes.unexpected == []


async def test_version_2_still_acts_through_the_runs_activities(kit_db_url: str) -> None:
    """Runs recorded with version 2 replay against it: it stays registered,
    with the ``runs.*`` activities it schedules."""
    fakes = (
        FakeActivities()
        .on("github.permission", permissions())
        .on("github.comment", REPLY)
        .on("runs.cancel_repair", {"cancelled": True})
    )
    async with kit(fakes, kit_db_url) as env:
        await env.start_workflow("slash-command", COMMAND_ID, command("cancel"), version=2)
        run = await env.wait_status(COMMAND_ID)
    assert run.result == {"verb": "cancel", "obeyed": True}
    [cancel] = fakes.inputs("runs.cancel_repair")
    assert cancel["reason"] == "@maya asked to cancel"
