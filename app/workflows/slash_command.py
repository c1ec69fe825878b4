"""The slash-command workflow (version 3): check the author's permission
through the API, then act (start, cancel, retry, status, help) or refuse
politely, once. Keyed by the comment's id (see :func:`slash_command_workflow_id`),
so a captured comment redelivered under a new delivery id does nothing. It
acts on the issue's repair run through the engine's run commands
(:mod:`app.workflows.repair_runs`). Versions 1 and 2
(:mod:`app.workflows.slash_command_v1`, :mod:`app.workflows.slash_command_v2`)
stay registered for the runs recorded with them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.contracts import github
from app.contracts.requests import HELP, RunRequest, SlashCommandRequest
from app.engine import RunDescription, WorkflowContext, typed_workflow
from app.workflows import repair_runs
from app.workflows.calls import call
from app.workflows.permissions import permission


class SlashCommandOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    verb: str
    obeyed: bool
    #: The author's permission when the command was refused.
    permission: str | None = None


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


def _describe(seen: RunDescription) -> str:
    if not seen.exists:
        return "No repair run for this issue yet. Comment `/repair` to start one."
    text = f"Repair run `{seen.run_id}` is **{seen.status}**."
    if isinstance(seen.query, dict) and seen.query.get("phase"):
        text += f" Current phase: {seen.query['phase']}."
    if seen.error:
        text += f"\n\nLast problem: {seen.error}"
    return text


def _retried(retried: repair_runs.Retried) -> str:
    if retried.created:
        return f"Started a new repair run `{retried.run_id}`."
    if retried.reason == repair_runs.MERGED:
        return (
            f"Run `{retried.run_id}` merged its fix, so there is nothing to retry. "
            "If the bug is back, open a new issue (or label this one again)."
        )
    if retried.reason == repair_runs.CANCELLING:
        return (
            f"Run `{retried.run_id}` was parked; it was asked to cancel, and it is still "
            "cleaning up. Comment `/repair retry` again once it has ended."
        )
    return f"Run `{retried.run_id}` is still active; nothing to retry."


async def _act(ctx: WorkflowContext, command: SlashCommandRequest) -> str:
    request, author, verb = command.request, command.author, command.command.verb
    if verb == "repair":
        started = await repair_runs.start_repair(ctx, request)
        return (
            f"Started repair run `{started.run_id}`. Progress is tracked in its status comment."
            if started.created
            else f"A repair run is already active for this issue: `{started.run_id}`."
        )
    if verb == "cancel":
        cancelled = await repair_runs.cancel_repair(ctx, request, f"@{author} asked to cancel")
        return (
            "Cancelling the repair run: active work stops, evidence is kept, resources are "
            "cleaned up. The status comment will say when it is done."
            if cancelled
            else "There is no active repair run to cancel."
        )
    if verb == "retry":
        return _retried(await repair_runs.retry_repair(ctx, request, author))
    if verb == "status":
        return _describe(await repair_runs.describe_repair(ctx, request))
    unknown = command.command.args if verb == "unknown" else None
    return (f"I don't know `/repair {unknown}`.\n\n" if unknown else "") + HELP


@typed_workflow("slash-command", version=3)
async def slash_command(ctx: WorkflowContext, command: SlashCommandRequest) -> SlashCommandOutcome:
    request, author, verb = command.request, command.author, command.command.verb
    granted = await permission(
        ctx, author, repo=request.repo, installation_id=request.installation_id, step="permission"
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
        return SlashCommandOutcome(verb=verb, obeyed=False, permission=granted.permission)
    reply = await _act(ctx, command)
    await _comment(ctx, request, ctx.run_id, "reply", f"@{author} {reply}")
    return SlashCommandOutcome(verb=verb, obeyed=True)


WORKFLOWS = [slash_command]
