"""``GET /metrics``: the process metrics of every process (multiprocess files
merged) followed by the record metrics read from the database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from app.config import Settings
from app.engine.client import RuntimeClient
from app.web.access import Principal

Handler = Callable[[Request, Principal], Awaitable[Response]]


def metrics_endpoint(settings: Settings, runtime: RuntimeClient) -> Handler:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from app.metrics import process_registry
    from app.metrics_db import RecordCollector

    records = CollectorRegistry(auto_describe=False)
    records.register(RecordCollector(runtime.engine))

    def render() -> bytes:
        return generate_latest(process_registry()) + generate_latest(records)

    async def metrics(request: Request, principal: Principal) -> Response:
        body = await asyncio.to_thread(render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return metrics
