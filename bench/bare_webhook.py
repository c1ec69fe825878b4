"""The intake benchmark's anchors, served by uvicorn the way ``repairbot web``
serves (no access log):

- **bare**: a Starlette endpoint that reads the body, verifies
  ``X-Hub-Signature-256`` (the app's own ``verify``) and answers 202. Nothing
  is recorded: it is what any webhook receiver pays for HTTP and the check.
- **durable floor** (``--database-url``): the same, plus one committed
  ``INSERT ... ON CONFLICT DO NOTHING`` of the delivery (id, event, body)
  before the answer, in the thread pool, through the engine factory the app
  uses (``app.engine._db.make_engine``: SQLite in WAL mode, PostgreSQL with
  psycopg). The least a receiver that loses nothing acknowledged must do.

    BENCH_WEBHOOK_SECRET=... python -m bench.bare_webhook --port 8123 [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import uvicorn
from sqlalchemy import Column, Engine, MetaData, String, Table, Text
from sqlalchemy.dialects import postgresql, sqlite
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.engine._db import make_engine
from app.webhooks.signature import verify

SECRET_ENV = "BENCH_WEBHOOK_SECRET"

FLOOR = Table(
    "floor_deliveries",
    MetaData(),
    Column("delivery_id", String(64), primary_key=True),
    Column("event", String(64), nullable=False),
    Column("body", Text, nullable=False),
)


def recorder(engine: Engine) -> Callable[[str, str, bytes], None]:
    """A function that durably records one delivery (idempotent by its id)."""
    FLOOR.create(engine, checkfirst=True)
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite

    def record(delivery_id: str, event: str, body: bytes) -> None:
        stmt = dialect.insert(FLOOR).values(
            delivery_id=delivery_id, event=event, body=body.decode("utf-8", "replace")
        )
        with engine.begin() as conn:
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["delivery_id"]))

    return record


def create_app(secret: str, engine: Engine | None = None) -> Starlette:
    record = recorder(engine) if engine is not None else None

    async def receive(request: Request) -> Response:
        body = await request.body()
        check = verify(body, request.headers.get("x-hub-signature-256"), secret)
        if not check.ok:
            return JSONResponse({"message": f"signature {check.value}"}, status_code=401)
        if record is not None:
            delivery = request.headers.get("x-github-delivery", "")
            event = request.headers.get("x-github-event", "")
            await run_in_threadpool(record, delivery, event, body)
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
    parser.add_argument(
        "--database-url", help="record each delivery durably here (the durable floor)"
    )
    args = parser.parse_args(argv)
    engine = make_engine(args.database_url) if args.database_url else None
    app = create_app(os.environ[SECRET_ENV], engine)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_config=None, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
