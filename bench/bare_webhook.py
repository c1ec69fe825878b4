"""The intake benchmark's anchor: a bare Starlette endpoint that reads the
body, verifies ``X-Hub-Signature-256`` (the app's own ``verify``) and answers
202, served by uvicorn the way ``repairbot web`` serves (no access log).
Nothing is recorded: it is the floor any webhook receiver pays.

    BENCH_WEBHOOK_SECRET=... python -m bench.bare_webhook --port 8123
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.webhooks.signature import verify

SECRET_ENV = "BENCH_WEBHOOK_SECRET"


def create_app(secret: str) -> Starlette:
    async def receive(request: Request) -> Response:
        body = await request.body()
        check = verify(body, request.headers.get("x-hub-signature-256"), secret)
        if not check.ok:
            return JSONResponse({"message": f"signature {check.value}"}, status_code=401)
        return JSONResponse({"message": "accepted"}, status_code=202)

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = [
        Route("/webhooks/github", receive, methods=["POST"]),
        Route("/healthz", health),
    ]
    return Starlette(routes=routes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_webhook")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = create_app(os.environ[SECRET_ENV])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_config=None, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
