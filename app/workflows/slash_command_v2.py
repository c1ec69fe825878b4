"""Version 2 of the slash-command workflow, frozen for the runs recorded with
it (the current version: :mod:`app.workflows.slash_command`). It acts on the
issue's repair run through the ``runs.*`` activities.
"""

from __future__ import annotations

from typing import Any

from app.contracts import github, runs
from app.contracts.requests import HELP, RunRequest, SlashCommandRequest
from app.engine import WorkflowContext, workflow
from app.workflows import slash_command_v1
from app.workflows.calls import call


async def _comment(
    ctx: WorkflowContext, request: RunRequest, op_run: str, op_step: str, body: str
) -> None:
    await call(
        ctx,
        github.comment,
        github.CommentInput(
            repo=request.repo,
            installation_id=request.installation_id,
            issue_number=request.issue_number,
            op_run=op_run,
            op_step=op_step,
            body=body,
        ),
        step=f"comment-{op_step}",
    )


def _describe(status: runs.DescribeResult) -> str:
    if not status.exists:
        return "No repair run for this issue yet. Comment `/repair` to start one."
    text = f"Repair run `{status.run_id}` is **{status.status}**."
    if status.phase is not None and status.phase.get("phase"):
        text += f" Current phase: {status.phase['phase']}."
    if status.error:
        text += f"\n\nLast problem: {status.error}"
    return text


async def _act(ctx: WorkflowContext, command: SlashCommandRequest) -> str:
    request, author, verb = command.request, command.author, command.command.verb
    if verb == "repair":
        started = await call(ctx, runs.start_repair, request, step="start")
        return (
            f"Started repair run `{started.run_id}`. Progress is tracked in its status comment."
            if started.created
            else f"A repair run is already active for this issue: `{started.run_id}`."
        )
    if verb == "cancel":
        outcome = await call(
            ctx,
            runs.cancel_repair,
            runs.CancelInput(request=request, reason=f"@{author} asked to cancel"),
            step="cancel",
        )
        return (
            "Cancelling the repair run: active work stops, evidence is kept, resources are "
            "cleaned up. The status comment will say when it is done."
            if outcome.cancelled
            else "There is no active repair run to cancel."
        )
    if verb == "retry":
        retried = await call(
            ctx,
            runs.retry_repair,
            runs.RetryInput(request=request, author=author),
            step="retry",
        )
        if retried.created:
            return f"Started a new repair run `{retried.run_id}`."
        if retried.reason == runs.MERGED:
            return (
                f"Run `{retried.run_id}` merged its fix, so there is nothing to retry. "
                "If the bug is back, open a new issue (or label this one again)."
            )
        return f"Run `{retried.run_id}` is still active; nothing to retry."
    if verb == "status":
        described = await call(ctx, runs.describe_repair, request, step="status")
        return _describe(described)
    unknown = command.command.args if verb == "unknown" else None
    return (f"I don't know `/repair {unknown}`.\n\n" if unknown else "") + HELP


@workflow("slash-command", version=2)
async def slash_command(ctx: WorkflowContext, raw: dict[str, Any]) -> dict[str, Any]:
    command = SlashCommandRequest.model_validate(raw)
    request, author, verb = command.request, command.author, command.command.verb
    granted = await call(
        ctx,
        github.permission,
        github.PermissionInput(
            repo=request.repo, installation_id=request.installation_id, user=author
        ),
        step="permission",
    )
    if not granted.may_write:
        # One refusal per person per issue: the operation id does not name this run.
        await _comment(
            ctx,
            request,
            f"refusal:{request.repo}#{request.issue_number}",
            author,
            f"Sorry @{author}, repairbot only takes commands from people with write "
            "access to this repository.",
        )
        return {"verb": verb, "obeyed": False, "permission": granted.permission}
    reply = await _act(ctx, command)
    await _comment(ctx, request, ctx.run_id, "reply", f"@{author} {reply}")
    return {"verb": verb, "obeyed": True}


WORKFLOWS = [slash_command_v1.slash_command, slash_command]
