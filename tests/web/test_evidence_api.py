"""``GET /api/evidence/{sha256}``: what any worker stored, served by the web
process from the database to an operator's API token; checked, never
rendered as HTML, and absent from the public listener without sign-in."""

from __future__ import annotations

import hashlib
import os

import httpx
from sqlalchemy import Engine, update

from app.config import Settings
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.engine._store import Store
from app.evidence import DatabaseEvidenceStore
from app.evidence.database import blobs
from app.operations.api_tokens import create_token
from app.web import create_app
from handlers import build_router


async def test_evidence_is_served_checked_and_as_text_or_bytes(db_engine: Engine) -> None:
    store = DatabaseEvidenceStore(db_engine)  # as a worker would have stored it
    log = store.put(b"<script>alert(1)</script>\nFAILED (failures=1)\n", kind="test-log", name="t")
    binary = store.put(os.urandom(512) + b"\xff", kind="screenshot", name="s.png")
    settings = Settings(
        github_client_id="Iv1.test",
        github_client_secret="client-secret",
        session_secret="s" * 32,
        public_url="http://repairbot",
    )
    token = create_token(Store(db_engine), "ops", {"read"})
    app = create_app(settings, Runtime(db_engine, Registry.of([], [])), router=build_router())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as anonymous:
        assert (await anonymous.get(f"/api/evidence/{log.sha256}")).status_code == 401
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://repairbot", headers=headers
    ) as api:
        text = await api.get(f"/api/evidence/{log.sha256}")
        assert text.status_code == 200 and text.content.startswith(b"<script>")
        assert text.headers["content-type"] == "text/plain; charset=utf-8"
        assert text.headers["x-content-type-options"] == "nosniff"
        raw = await api.get(f"/api/evidence/{binary.sha256}")
        assert raw.headers["content-type"] == "application/octet-stream"
        assert hashlib.sha256(raw.content).hexdigest() == binary.sha256
        assert (await api.get(f"/api/evidence/{'0' * 64}")).status_code == 404
        assert (await api.get("/api/evidence/not-a-hash")).status_code == 400
        with db_engine.begin() as conn:
            conn.execute(
                update(blobs)
                .where(blobs.c.sha256 == log.sha256)
                .values(encoding="identity", data=b"tampered")
            )
        altered = await api.get(f"/api/evidence/{log.sha256}")
        assert altered.status_code == 500 and "altered" in altered.json()["message"]


async def test_without_sign_in_the_public_listener_serves_no_evidence(db_engine: Engine) -> None:
    log = DatabaseEvidenceStore(db_engine).put(b"FAILED\n", kind="test-log", name="t")
    app = create_app(Settings(), Runtime(db_engine, Registry.of([], [])), router=build_router())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as api:
        assert (await api.get(f"/api/evidence/{log.sha256}")).status_code == 404
