"""The Starlette application.

The public listener always serves ``POST /webhooks/github`` and ``/healthz``.
Everything else (dashboard, JSON API, ``/metrics``, static assets) exists
only when sign-in is configured (App client id and secret, a session secret,
a public URL), and then every one of those routes asks for a signed-in
person or an operator API token. A deployment that sets nothing but the
webhook secret exposes nothing but the webhook.

The web process only verifies, records and enqueues; workers do the work. In
the embedded mode (``run_worker=True``) the same process also runs the
runtime's in-process dispatcher and reconciler, started with the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from app.config import Settings
from app.engine import Runtime, RuntimeClient
from app.evidence import open_evidence_store
from app.intake.pipeline import Intake
from app.web.access import RepoAccess
from app.web.api import Api
from app.web.group_commit import GroupCommit, checkpoint_every_for, writers_for
from app.web.guard import Guard
from app.web.headers import SecurityHeaders
from app.web.limits import BodyGate, BodyLimits
from app.web.live import Live
from app.web.metrics_endpoint import metrics_endpoint, token_only
from app.web.oauth import SignIn
from app.web.observe import evidence_api, health_endpoint
from app.web.pages import Pages
from app.web.session import SessionCodec
from app.web.webhooks import webhook_endpoint
from app.webhooks.routing import Router

STATIC = Path(__file__).parent / "static"


def operator_routes(
    settings: Settings,
    runtime: RuntimeClient,
    intake: Intake,
    *,
    github_transport: httpx.AsyncBaseTransport | None = None,
) -> list[BaseRoute]:
    """Dashboard, API, live streams, metrics and sign-in: all behind the guard."""
    codec = SessionCodec(settings.session_secret, max_age=settings.session_hours * 3600)
    access = RepoAccess(
        settings.github_api_url,
        ttl=settings.permission_cache_seconds,
        transport=github_transport,
    )
    guard = Guard(settings, runtime.store, access, codec)
    sign_in = SignIn(settings, codec, access, guard, transport=github_transport)
    pages = Pages(settings, runtime, intake, guard)
    api = Api(runtime, guard)
    live = Live(runtime)

    async def home(request: Request) -> Response:
        return RedirectResponse("/runs", status_code=303)

    async def signed_out(request: Request) -> Response:
        return pages.message(request, None, "Signed out", "You are signed out.", 200)

    return [
        Route("/", home),
        Route("/login", sign_in.login),
        Route("/auth/callback", sign_in.callback),
        Route("/logout", sign_in.logout, methods=["POST"]),
        Route("/signed-out", signed_out),
        Route("/runs", guard.page(pages.runs)),
        Route("/runs/live", guard.api(live.runs)),
        # Run ids hold slashes (``repair:owner/repo#1/1``): the longer routes first.
        Route("/runs/{run_id:path}/live", guard.api(live.run)),
        Route("/runs/{run_id:path}/evidence/{sha}", guard.page(pages.evidence_raw)),
        Route("/runs/{run_id:path}/actions", guard.page(pages.act), methods=["POST"]),
        Route("/runs/{run_id:path}", guard.page(pages.run)),
        Route("/deliveries", guard.page(pages.deliveries)),
        Route(
            "/deliveries/{delivery_id}/rerun",
            guard.page(pages.rerun_delivery),
            methods=["POST"],
        ),
        Route("/api/runs", guard.api(api.runs)),
        Route(
            "/api/runs/{run_id:path}/actions/{action}",
            guard.api(api.act, scope="act"),
            methods=["POST"],
        ),
        Route("/api/runs/{run_id:path}", guard.api(api.run)),
        Route(
            "/api/evidence/{sha256}",
            guard.api(evidence_api(open_evidence_store(settings, runtime.engine))),
        ),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]


def create_app(
    settings: Settings,
    runtime: RuntimeClient,
    *,
    router: Router,
    run_worker: bool = False,
    github_transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """``router``: the webhook handlers (the composition root builds it, so the
    web package never imports ``handlers/``). ``runtime``: a client is all the
    web process needs; ``run_worker``
    (the embedded mode) needs the worker runtime. ``github_transport``: how
    the sign-in reaches GitHub (tests: the emulator in-process)."""
    worker = runtime if isinstance(runtime, Runtime) and run_worker else None
    if run_worker and worker is None:
        raise TypeError("run_worker needs the worker runtime (Runtime), not a client")
    intake = Intake(runtime.store, runtime.registry, router, settings)
    threads = runtime.threads
    engine = runtime.store.engine
    writer = GroupCommit(
        intake,
        threads,
        writers=writers_for(engine, threads.threads),
        checkpoint_every=checkpoint_every_for(engine),
    )
    gate = BodyGate(
        BodyLimits(
            max_bytes=settings.webhook_max_bytes,
            read_timeout=settings.webhook_read_timeout,
            bytes_in_flight=settings.webhook_bytes_in_flight,
            start_timeout=settings.webhook_body_start_timeout,
            bytes_per_client=settings.webhook_bytes_per_client,
        )
    )
    routes: list[BaseRoute] = [
        Route("/webhooks/github", webhook_endpoint(writer, runtime, gate), methods=["POST"]),
        Route("/healthz", health_endpoint(runtime)),
        # A scraper's token is enough: no sign-in needed (app/web/metrics_endpoint.py).
        Route("/metrics", token_only(metrics_endpoint(settings, runtime), runtime.store)),
    ]
    if settings.sign_in_configured:
        routes += operator_routes(settings, runtime, intake, github_transport=github_transport)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if worker is not None:
            await worker.start_in_process()
        try:
            yield
        finally:
            if worker is not None:
                await worker.stop()

    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])
    #: The intake's byte budget, for operators' tests and probes in this process.
    app.state.body_gate = gate
    #: The deliveries' one writer, for tests that look at how they were grouped.
    app.state.intake_writer = writer
    return app
