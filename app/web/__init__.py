"""The Starlette application: webhook intake, health, metrics, API, dashboard.

The web process only verifies, records and enqueues; workers do the work. In
the embedded mode (``run_worker=True``) the same process also runs the
runtime's in-process dispatcher and reconciler, started with the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Route

from app.config import Settings
from app.engine.runtime import Runtime
from app.evidence import open_evidence_store
from app.intake import Intake
from app.web.limits import BodyGate, BodyLimits
from app.web.observe import (
    dashboard,
    evidence_api,
    health_endpoint,
    metrics_endpoint,
    run_api,
    runs_api,
)
from app.web.webhooks import webhook_endpoint
from handlers import build_router


def create_app(settings: Settings, runtime: Runtime, *, run_worker: bool = False) -> Starlette:
    intake = Intake(runtime.store, runtime.registry, build_router(), settings)
    gate = BodyGate(
        BodyLimits(
            max_bytes=settings.webhook_max_bytes,
            read_timeout=settings.webhook_read_timeout,
            bytes_in_flight=settings.webhook_bytes_in_flight,
        )
    )
    routes = [
        Route("/webhooks/github", webhook_endpoint(intake, runtime, gate), methods=["POST"]),
        Route("/healthz", health_endpoint(runtime)),
        Route("/metrics", metrics_endpoint(runtime, gate)),
        Route("/api/runs", runs_api(runtime)),
        Route("/api/runs/{run_id:path}", run_api(runtime)),
        Route(
            "/api/evidence/{sha256}",
            evidence_api(open_evidence_store(settings, runtime.engine)),
        ),
        Route("/", dashboard(runtime)),
    ]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if run_worker:
            await runtime.start_in_process()
        try:
            yield
        finally:
            if run_worker:
                await runtime.stop()

    return Starlette(routes=routes, lifespan=lifespan)
