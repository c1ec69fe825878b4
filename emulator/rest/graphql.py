"""The GraphQL mutations around drafts: ``markPullRequestReadyForReview`` (what
repairbot needs) and ``convertPullRequestToDraft`` (what a human does).

GitHub has no REST endpoint that takes a pull request out of draft or back
into it; clients use these mutations. Anything else gets a GraphQL error (200 with ``errors``), as
GitHub answers an unsupported query.
"""

from __future__ import annotations

import re
from typing import Any

from emulator.auth import can_see, may
from emulator.render.base import node_id
from emulator.rest.http import ApiError, Ctx, Reply, Spec
from emulator.rest.pulls import convert_to_draft, ready_for_review

_MUTATION = re.compile(r"\b(markPullRequestReadyForReview|convertPullRequestToDraft)\b")
_INLINE_ID = re.compile(r'pullRequestId\s*:\s*"([^"]+)"')


def _error(message: str) -> Reply:
    return Reply(200, {"data": None, "errors": [{"type": "UNSUPPORTED", "message": message}]})


def _pull_id(query: str, variables: dict[str, Any]) -> str | None:
    inline = _INLINE_ID.search(query)
    if inline:
        return inline.group(1)
    for value in variables.values():
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and isinstance(value.get("pullRequestId"), str):
            return str(value["pullRequestId"])
    return None


def graphql(ctx: Ctx) -> Reply:
    body = ctx.json()
    query = str(body.get("query", ""))
    mutation = _MUTATION.search(query)
    if not mutation:
        return _error(
            "the emulator's GraphQL supports only markPullRequestReadyForReview and "
            "convertPullRequestToDraft"
        )
    name = mutation.group(1)
    wanted = _pull_id(query, body.get("variables") or {})
    for repo in ctx.emu.store.repos.values():
        for issue in repo.issues.values():
            pr = issue.pull
            if pr is None or node_id("PullRequest", pr.id) != wanted:
                continue
            if not can_see(ctx.emu.store, ctx.principal, repo):
                break
            if not may(
                ctx.principal, repo, permission="pull_requests", level="write", role="write"
            ):
                return Reply(
                    200,
                    {
                        "data": None,
                        "errors": [
                            {
                                "type": "FORBIDDEN",
                                "message": "Resource not accessible by integration",
                            }
                        ],
                    },
                )
            if name == "convertPullRequestToDraft":
                convert_to_draft(ctx.emu, repo, pr, ctx.actor())
            elif pr.draft:
                ready_for_review(ctx.emu, repo, pr, ctx.actor())
            payload = {"pullRequest": {"id": wanted, "isDraft": pr.draft, "number": pr.number}}
            return Reply(200, {"data": {name: payload}})
    if ctx.principal.kind == "anonymous":
        raise ApiError(401, "Requires authentication")
    return Reply(
        200,
        {
            "data": None,
            "errors": [
                {
                    "type": "NOT_FOUND",
                    "message": f"Could not resolve to a node with the global id of '{wanted}'",
                }
            ],
        },
    )


SPEC = Spec("POST", "/graphql", graphql)
