"""``POST /webhooks/github``: read the body (capped), hand it to the intake,
dispatch the jobs it committed, answer fast."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.runtime import Runtime
from app.intake import MAX_BODY_BYTES, Intake
from app.logs import log_context
from app.metrics import instruments

_EVENT_NAME = re.compile(r"^[a-z_]{1,40}$")
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
        started = time.perf_counter()
        delivery = request.headers.get("x-github-delivery", "")
        with log_context(delivery_id=delivery or None):
            # The database work is short but synchronous: keep it off the event loop.
            result = await asyncio.to_thread(intake.receive, request.headers, body)
            await runtime.dispatch(result.jobs)
        meter = instruments()
        meter.intake_seconds.labels(str(result.status_code)).observe(time.perf_counter() - started)
        # Only a verified delivery names its event: an unsigned request must not
        # mint label values (one time series each).
        event = request.headers.get("x-github-event", "")
        if result.status_code in (400, 401, 413) or not _EVENT_NAME.match(event):
            event = "-"
        meter.intake_results.labels(str(result.status_code), event).inc()
        return JSONResponse({"message": result.message}, status_code=result.status_code)

    return receive
