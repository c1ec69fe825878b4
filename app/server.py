"""Serving the web app with uvicorn, alone or with an in-process worker."""

from __future__ import annotations

import logging

import uvicorn
from arq import create_pool
from arq.connections import RedisSettings

from app.config import Settings
from app.engine.arq_dispatch import ArqDispatcher
from app.migrate import upgrade
from app.web import create_app
from app.worker import build_runtime

log = logging.getLogger("repairbot.server")


async def run_web(settings: Settings, *, host: str, port: int, with_worker: bool) -> int:
    """``with_worker``: the embedded default (SQLite, one process, no Redis).
    Otherwise the web process only records and enqueues through arq."""
    runtime = build_runtime(settings)
    pool = None
    if with_worker:
        upgrade(settings.database_url)
    elif settings.redis_url:
        pool = await create_pool(RedisSettings.from_dsn(settings.redis_url))
        runtime.use_dispatcher(ArqDispatcher(pool))
    else:
        log.warning("no REDIS_URL and no in-process worker: jobs wait for a worker's relay")
    app = create_app(settings, runtime, run_worker=with_worker)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        # SIGTERM (a deploy): stop accepting, let in-flight deliveries finish and
        # be recorded, then close whatever is still open after the grace period.
        timeout_graceful_shutdown=int(settings.web_shutdown_grace),
    )
    try:
        await uvicorn.Server(config).serve()
    finally:
        if pool is not None:
            await pool.aclose()
    return 0
