"""Version 1 of the slash-command workflow, frozen for runs in flight.

The slash-command workflow: check the author's permission through the API,
then act (start, cancel, retry, status, help) or refuse politely, once."""

from __future__ import annotations

from typing import Any

from app.contracts import github, runs
from app.contracts.requests import HELP
from app.engine import WorkflowContext, workflow

WRITE_OR_HIGHER = frozenset({"admin", "maintain", "write"})


def _comment(
    ctx: WorkflowContext, request: dict[str, Any], op_run: str, op_step: str, body: str
) -> Any:
    return ctx.activity(
        github.comment,
        {
            "repo": request["repo"],
            "installation_id": request["installation_id"],
            "issue_number": request["issue_number"],
            "op_run": op_run,
            "op_step": op_step,
            "body": body,
        },
        step=f"comment-{op_step}",
    )


def _describe(status: dict[str, Any]) -> str:
    if not status.get("exists"):
        return "No repair run for this issue yet. Comment `/repair` to start one."
    text = f"Repair run `{status['run_id']}` is **{status['status']}**."
    phase = status.get("phase")
    if isinstance(phase, dict) and phase.get("phase"):
        text += f" Current phase: {phase['phase']}."
    if status.get("error"):
        text += f"\n\nLast problem: {status['error']}"
    return text


@workflow("slash-command", version=1)
async def slash_command(ctx: WorkflowContext, command_input: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = command_input["request"]
    author: str = command_input["author"]
    verb: str = command_input["command"]["verb"]
    granted = await ctx.activity(
        github.permission,
        {"repo": request["repo"], "installation_id": request["installation_id"], "user": author},
        step="permission",
    )
    if granted["permission"] not in WRITE_OR_HIGHER:
        # One refusal per person per issue: the operation id does not name this run.
        await _comment(
            ctx,
            request,
            f"refusal:{request['repo']}#{request['issue_number']}",
            author,
            f"Sorry @{author}, repairbot only takes commands from people with write "
            "access to this repository.",
        )
        return {"verb": verb, "obeyed": False, "permission": granted["permission"]}

    reply: str
    if verb == "repair":
        started = await ctx.activity(runs.start_repair, request, step="start")
        reply = (
            f"Started repair run `{started['run_id']}`. Progress is tracked in its status comment."
            if started["created"]
            else f"A repair run is already active for this issue: `{started['run_id']}`."
        )
    elif verb == "cancel":
        outcome = await ctx.activity(
            runs.cancel_repair,
            {"request": request, "reason": f"@{author} asked to cancel"},
            step="cancel",
        )
        reply = (
            "Cancelling the repair run: active work stops, evidence is kept, resources are "
            "cleaned up. The status comment will say when it is done."
            if outcome["cancelled"]
            else "There is no active repair run to cancel."
        )
    elif verb == "retry":
        retried = await ctx.activity(
            runs.retry_repair, {"request": request, "author": author}, step="retry"
        )
        reply = (
            f"Started a new repair run `{retried['run_id']}`."
            if retried["created"]
            else f"Run `{retried['run_id']}` is still active; nothing to retry."
        )
    elif verb == "status":
        reply = _describe(await ctx.activity(runs.describe_repair, request, step="status"))
    else:
        unknown = command_input["command"]["args"] if verb == "unknown" else None
        reply = (f"I don't know `/repair {unknown}`.\n\n" if unknown else "") + HELP
    await _comment(ctx, request, ctx.run_id, "reply", f"@{author} {reply}")
    return {"verb": verb, "obeyed": True}


WORKFLOWS = [slash_command]
