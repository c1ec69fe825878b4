"""``POST /webhooks/github``: read the body within limits, hand it to the intake,
dispatch the jobs it committed, answer fast."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.runtime import Runtime
from app.intake import Intake
from app.web.limits import BodyGate, BodyRefused

Endpoint = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("repairbot.web")


def webhook_endpoint(intake: Intake, runtime: Runtime, gate: BodyGate) -> Endpoint:
    async def receive(request: Request) -> Response:
        try:
            async with gate.body(request) as body:
                # The database work is short but synchronous: keep it off the event loop.
                result = await asyncio.to_thread(intake.receive, request.headers, body)
        except BodyRefused as refused:
            return refused.response()
        try:
            await runtime.dispatch(result.jobs)
        except Exception:
            # The jobs are in the outbox, committed with the delivery: the relay
            # sends them when the dispatch channel is back. The delivery is safe.
            log.warning("dispatch after intake failed; the relay will retry", exc_info=True)
        headers = {"Retry-After": str(result.retry_after)} if result.retry_after else None
        return JSONResponse(
            {"message": result.message}, status_code=result.status_code, headers=headers
        )

    return receive
