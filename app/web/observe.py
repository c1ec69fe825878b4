"""``/healthz`` (the one unauthenticated read besides the webhook) and the
evidence reader that the signed-in API mounts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine import RuntimeClient
from app.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceStore
from app.web.access import Principal

Endpoint = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("repairbot.web")
#: A database that does not answer within this long counts as down (a
#: black-holed host would otherwise hold the probe for the TCP timeout).
HEALTH_TIMEOUT = 5.0


def health_endpoint(runtime: RuntimeClient) -> Endpoint:
    def ping() -> None:
        with runtime.engine.connect() as conn:
            conn.execute(text("select 1"))

    async def healthz(request: Request) -> Response:
        try:
            # Off the event loop: a database that hangs must not stall webhooks.
            await asyncio.wait_for(asyncio.to_thread(ping), HEALTH_TIMEOUT)
        except Exception:
            # The detail (host names, driver messages) goes to the log, never to
            # the public port.
            log.warning("health check: database unreachable", exc_info=True)
            return JSONResponse({"ok": False}, status_code=503)
        return JSONResponse({"ok": True})

    return healthz


def evidence_api(
    store: EvidenceStore,
) -> Callable[[Request, Principal], Awaitable[Response]]:
    """``GET /api/evidence/{sha256}``: an artifact's bytes, checked against its hash.

    Served as text when it decodes as UTF-8, else as bytes; never rendered as
    HTML (repository output is hostile). By hash alone, so only for operator
    tokens that may read every run; people read evidence through the page of
    a run they can see.
    """

    async def show_evidence(request: Request, principal: Principal) -> Response:
        if principal.kind != "token":
            return JSONResponse({"message": "read evidence from its run's page"}, status_code=403)
        sha = request.path_params["sha256"]
        try:
            data = await asyncio.to_thread(store.get, sha)
        except ValueError:
            return JSONResponse({"message": "not a sha256 hex digest"}, status_code=400)
        except EvidenceMissing:
            return JSONResponse({"message": "no such evidence"}, status_code=404)
        except EvidenceCorrupt as exc:
            return JSONResponse({"message": str(exc)}, status_code=500)
        try:
            data.decode()
            media_type = "text/plain; charset=utf-8"
        except UnicodeDecodeError:
            media_type = "application/octet-stream"
        headers = {"X-Content-Type-Options": "nosniff", "ETag": f'"{sha}"'}
        return Response(data, media_type=media_type, headers=headers)

    return show_evidence
