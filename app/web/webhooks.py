"""``POST /webhooks/github``: read the body (capped), hand it to the intake,
dispatch the jobs it committed, answer fast."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.runtime import Runtime
from app.intake import MAX_BODY_BYTES, Intake

Endpoint = Callable[[Request], Awaitable[Response]]


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def webhook_endpoint(intake: Intake, runtime: Runtime) -> Endpoint:
    async def receive(request: Request) -> Response:
        body = await read_capped(request, MAX_BODY_BYTES)
        if body is None:
            return JSONResponse({"message": "payload larger than 25 MB"}, status_code=413)
        # The database work is short but synchronous: keep it off the event loop.
        result = await asyncio.to_thread(intake.receive, request.headers, body)
        await runtime.dispatch(result.jobs)
        return JSONResponse({"message": result.message}, status_code=result.status_code)

    return receive
