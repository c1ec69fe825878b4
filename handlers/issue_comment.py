"""``issue_comment``: slash commands in issues and in repairbot's pull requests.

Whether the author may command the bot is a GitHub question (their permission
on the repository), so the handler only starts a small durable command
workflow that checks permission through the API and then acts or politely
refuses. The command workflow is keyed by the comment's id and started at
most once: a redelivered comment, or a captured signed comment replayed
under a new delivery id, does nothing.
"""

from __future__ import annotations

from app.contracts.ids import SLASH_COMMAND_WORKFLOW, slash_command_workflow_id
from app.contracts.requests import SlashCommandRequest, SlashCommandSpec
from app.webhooks.events import IssueCommentEvent
from app.webhooks.routing import HandlerContext, Router
from handlers.inputs import repair_request
from handlers.slash import SlashCommand, parse_command

router = Router()


@router.on("issue_comment", "created")
def created(event: IssueCommentEvent, ctx: HandlerContext) -> None:
    if event.sender.is_bot or event.comment.user.is_bot:
        return  # never obey bots, our own status comments included
    parsed = parse_command(event.comment.body)
    if parsed is None:
        return
    if event.installation is None:
        ctx.notes.append("no installation in the payload: cannot act")
        return
    command = (
        SlashCommandSpec(verb=parsed.verb.value, args=parsed.args)
        if isinstance(parsed, SlashCommand)
        else SlashCommandSpec(verb="unknown", args=parsed.word)
    )
    workflow_id = slash_command_workflow_id(event.comment.id)
    if ctx.tx.has_run(workflow_id):
        ctx.notes.append(f"comment {event.comment.id} was already handled: ignored")
        return
    request = SlashCommandRequest(
        command=command,
        author=event.comment.user.login,
        comment_id=event.comment.id,
        on_pull_request=event.issue.is_pull_request,
        request=repair_request(
            event,
            trigger="comment",
            requested_by=event.comment.user.login,
            delivery_id=ctx.delivery_id,
            git_url=ctx.settings.github_git_url,
        ),
    )
    ctx.start(SLASH_COMMAND_WORKFLOW, workflow_id, request.model_dump(mode="json"))
