"""``POST /webhooks/github``: read the body (within the gate's limits), hand
it to the intake's writer (group commit), dispatch the jobs it committed,
answer fast."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine import RuntimeClient
from app.logs import log_context
from app.operations.metrics import instruments
from app.web.group_commit import GroupCommit
from app.web.limits import BodyGate, BodyRefused

_EVENT_NAME = re.compile(r"^[a-z_]{1,40}$")
Endpoint = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("repairbot.web")


def webhook_endpoint(writer: GroupCommit, runtime: RuntimeClient, gate: BodyGate) -> Endpoint:
    async def receive(request: Request) -> Response:
        started = time.perf_counter()
        meter = instruments()
        delivery = request.headers.get("x-github-delivery", "")
        with log_context(delivery_id=delivery or None):
            try:
                async with gate.body(request) as body:
                    # Recorded on the store's thread, off the event loop, in a
                    # transaction shared with the deliveries that arrived with it.
                    result = await writer.receive(request.headers, body)
            except BodyRefused as refused:
                response = refused.response()
                meter.intake_results.labels(str(response.status_code), "-").inc()
                return response
            try:
                await runtime.dispatch(result.jobs)
            except Exception:
                # The jobs are in the outbox, committed with the delivery: the relay
                # sends them when the dispatch channel is back. The delivery is safe.
                log.warning("dispatch after intake failed; the relay will retry", exc_info=True)
        meter.intake_seconds.labels(str(result.status_code)).observe(time.perf_counter() - started)
        # Only a verified delivery names its event: an unsigned request must not
        # mint label values (one time series each).
        event = request.headers.get("x-github-event", "")
        if result.status_code in (400, 401, 413) or not _EVENT_NAME.match(event):
            event = "-"
        meter.intake_results.labels(str(result.status_code), event).inc()
        # One line per delivery answered: which, what it was, what happened.
        log.info(
            "delivery %s (%s): %d %s",
            delivery or "-",
            event,
            result.status_code,
            result.message,
            extra={"event": event, "status": result.status_code},
        )
        headers = {"Retry-After": str(result.retry_after)} if result.retry_after else None
        return JSONResponse(
            {"message": result.message}, status_code=result.status_code, headers=headers
        )

    return receive
