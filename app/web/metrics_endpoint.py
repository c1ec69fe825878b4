"""``GET /metrics``: the process metrics of every process (multiprocess files
merged), this process's ``process_*`` metrics and ``repairbot_build_info``,
followed by the record metrics read from the database.

It needs an operator token with the ``metrics`` scope and nothing else: a
scraper has no browser, so the endpoint exists whether or not dashboard
sign-in is configured (:func:`token_only`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.config import Settings
from app.engine import RuntimeClient, Store
from app.operations.api_tokens import verify_token
from app.version import package_version
from app.web.access import Principal

Handler = Callable[[Request, Principal], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


class BuildInfo:
    """``repairbot_build_info{version, code_version} 1``: which build answers."""

    def __init__(self, code_version: str) -> None:
        self.labels = [package_version(), code_version]

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        info = GaugeMetricFamily(
            "repairbot_build_info",
            "The repairbot version and deployed code version answering (always 1).",
            labels=["version", "code_version"],
        )
        info.add_metric(self.labels, 1)
        yield info


def metrics_endpoint(settings: Settings, runtime: RuntimeClient) -> Handler:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        ProcessCollector,
        generate_latest,
    )

    from app.operations.metrics import multiprocess, process_registry
    from app.operations.metrics_db import RecordCollector

    records = CollectorRegistry(auto_describe=False)
    records.register(BuildInfo(settings.code_version))
    if multiprocess():
        # The merged view holds no process_* series (they are per process, not
        # summable): report the answering process's own, as the default
        # registry of a single process does.
        ProcessCollector(registry=records)
    records.register(RecordCollector(runtime.engine))

    def render() -> bytes:
        return generate_latest(process_registry()) + generate_latest(records)

    async def metrics(request: Request, principal: Principal) -> Response:
        body = await asyncio.to_thread(render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return metrics


def token_only(handler: Handler, store: Store, *, scope: str = "metrics") -> Endpoint:
    """``handler`` for requests that carry an operator token with ``scope``
    (``Authorization: Bearer rbt_...``); no session cookie is looked at."""

    async def endpoint(request: Request) -> Response:
        kind, _, credential = request.headers.get("authorization", "").partition(" ")
        record = None
        if kind.lower() == "bearer" and credential.strip():
            record = await asyncio.to_thread(verify_token, store, credential.strip())
        if record is None:
            return JSONResponse(
                {
                    "message": f"send an operator token with the {scope!r} scope as "
                    "'Authorization: Bearer'"
                },
                status_code=401,
                headers={"www-authenticate": 'Bearer realm="repairbot"'},
            )
        if scope not in record.scopes:
            return JSONResponse({"message": f"needs the {scope!r} scope"}, status_code=403)
        return await handler(request, Principal("token", f"token:{record.name}", record.scopes))

    return endpoint
