from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select

from app.app_tables import WebhookDelivery
from app.config import Settings
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.web import create_app
from handlers import build_router
from tests.web.support import SECRET, STAND_INS, Poster


@pytest.fixture
async def web(db_engine: Engine) -> AsyncIterator[tuple[Poster, Runtime]]:
    settings = Settings(github_webhook_secret=SECRET, trigger_label="repairbot")
    registry = Registry.of(STAND_INS)
    runtime = Runtime(db_engine, registry)  # no dispatcher: the tests look at the records
    app = create_app(settings, runtime, router=build_router())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as client:
        yield Poster(client, SECRET), runtime


@pytest.fixture
def deliveries(db_engine: Engine) -> Callable[[], list[Any]]:
    table = WebhookDelivery.__table__  # type: ignore[attr-defined]

    def read() -> list[Any]:
        with db_engine.connect() as conn:
            return list(conn.execute(select(table).order_by(table.c.received_at)).all())

    return read
