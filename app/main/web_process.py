"""Serving the web app with uvicorn, alone or with an in-process worker."""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn

from app.config import Settings
from app.engine import ArqDispatcher, RuntimeClient, freeze_startup_heap, make_engine
from app.engine import connect_redis as connect
from app.main.catalog import build_registry
from app.main.children import watch_children_without_threads
from app.main.startup_line import log_startup
from app.main.worker_process import background, build_runtime, delivery_reconciler
from app.operations.migrate import upgrade
from app.operations.registration import Registrar
from app.web import create_app
from app.web.connections import (
    MAX_HEADER_BYTES,
    ConnectionCounts,
    ConnectionLimits,
    guarded_protocol,
    raise_open_file_limit,
)
from handlers import build_router

log = logging.getLogger("repairbot.server")


class GracefulServer(uvicorn.Server):
    """SIGTERM is a deploy, not a crash: drain, then exit 0.

    uvicorn finishes in-flight requests on SIGTERM and then raises the signal
    again so the process dies of it; a supervisor would read that as a crash.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)


async def run_web(settings: Settings, *, host: str, port: int, with_worker: bool) -> int:
    """``with_worker``: the embedded default (SQLite, one process, no Redis).
    Otherwise the web process only records and enqueues through arq: it
    builds the runtime's client, and none of the worker's clients (agent
    HTTP, GitHub App tokens)."""
    # Before anything starts a subprocess: no thread per git or sandbox command.
    watch_children_without_threads()
    runtime: RuntimeClient
    pool = None
    if with_worker:
        upgrade(settings.database_url)
        runtime = build_runtime(settings)
    elif settings.redis_url:
        runtime = build_client(settings)
        pool = await connect(settings.redis_url)
        runtime.use_dispatcher(ArqDispatcher(pool))
    else:
        runtime = build_client(settings)
        log.warning("no REDIS_URL and no in-process worker: jobs wait for a worker's relay")
    app = create_app(settings, runtime, run_worker=with_worker, router=build_router())
    log_startup(settings, role="serve" if with_worker else "web", listening=f"http://{host}:{port}")
    freeze_startup_heap()  # see app/engine/_heap.py: no 100 ms collector pauses mid-request
    raise_open_file_limit()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        # A head that never completes, or a client holding every descriptor,
        # must not stop deliveries (app/web/connections.py).
        http=guarded_protocol(
            ConnectionLimits(
                header_timeout=settings.web_header_timeout,
                per_client=settings.web_connections_per_client,
            ),
            ConnectionCounts(),
        ),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=5,
        # SIGTERM (a deploy): stop accepting, let in-flight deliveries finish and
        # be recorded, then close whatever is still open after the grace period.
        timeout_graceful_shutdown=int(settings.web_shutdown_grace),
    )
    # The embedded mode is also the only worker: it runs the delivery reconciler.
    reconciler = delivery_reconciler(settings) if with_worker else None
    try:
        async with background(
            "delivery-reconciler", reconciler.run_forever() if reconciler else None
        ):
            await GracefulServer(config).serve()
    finally:
        if pool is not None:
            await pool.aclose()
    return 0


def build_client(settings: Settings) -> RuntimeClient:
    """What the web process needs of the runtime: start, signal, steer, read."""
    return RuntimeClient(
        make_engine(settings.database_url), build_registry(), fault_point=settings.fault_point
    )


async def serve_registration(registrar: Registrar, *, host: str, port: int) -> None:
    """Serve ``repairbot register``'s page until the App is registered."""
    server = uvicorn.Server(
        uvicorn.Config(registrar.asgi(), host=host, port=port, log_config=None, access_log=False)
    )

    async def stop_when_done() -> None:
        await registrar.done.wait()
        await asyncio.sleep(0.5)  # let the confirmation page reach the browser
        server.should_exit = True

    watcher = asyncio.create_task(stop_when_done())
    try:
        await server.serve()
    finally:
        watcher.cancel()
