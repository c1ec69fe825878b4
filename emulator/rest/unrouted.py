"""What GitHub answers where it has no route: a JSON 404, also for a method a
known path does not take (GitHub says 404 there, not 405), never text/plain."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from emulator.rest.http import not_found_body
from emulator.smart_http import is_git_path


async def json_not_found(request: Request, exc: Exception) -> Response:
    """Starlette's handler for its own 404 and 405."""
    return JSONResponse(not_found_body(), status_code=404)


class GitOrNotFound:
    """The git smart-HTTP app for git's paths; GitHub's JSON 404 for the rest."""

    def __init__(self, git: ASGIApp) -> None:
        self.git = git

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_git_path(scope):
            await self.git(scope, receive, send)
            return
        await JSONResponse(not_found_body(), status_code=404)(scope, receive, send)
