"""``/healthz``: the one unauthenticated read besides the webhook."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.runtime import Runtime

Endpoint = Callable[[Request], Awaitable[Response]]


def health_endpoint(runtime: Runtime) -> Endpoint:
    async def healthz(request: Request) -> Response:
        try:
            with runtime.engine.connect() as conn:
                conn.execute(text("select 1"))
        except Exception as exc:
            return JSONResponse({"ok": False, "database": str(exc)}, status_code=503)
        return JSONResponse({"ok": True})

    return healthz
