"""Worker processes: arq over Redis (production) or in-process (embedded)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

import httpx

from activities.github import GitHubAccess
from activities.workspace import InstallationGit
from app.agent.factory import AgentPolicy
from app.agent.http import AgentHttp
from app.commands import Sandbox
from app.config import Settings
from app.engine.activity_context import Dependencies
from app.engine.arq_dispatch import ArqConsumers, ArqDispatcher
from app.engine.db import make_engine
from app.engine.redis_channel import connect, redis_settings
from app.engine.runtime import Runtime
from app.evidence import EvidenceStore
from app.github.client import GitHubClientFactory
from app.registry import build_registry
from app.repo_config import AgentConfig, Command
from app.workspace import sweep_workspaces

log = logging.getLogger("repairbot.worker")


def shared_clients(settings: Settings) -> Dependencies:
    """Clients built once per process and handed to every activity."""
    deps = Dependencies(
        settings,
        EvidenceStore(settings.evidence_dir),
        Sandbox(),
        AgentPolicy.from_env(os.environ, default=_default_agent(settings)),
        # A client of its own: never one that carries GitHub credentials.
        AgentHttp(httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=15.0))),
    )
    if settings.github_app_id:
        factory = GitHubClientFactory.from_settings(settings)
        deps.add(GitHubAccess(factory, settings.github_git_url))

        async def token_for(installation_id: int) -> str:
            return (await factory.installation_token(installation_id)).token

        deps.add(InstallationGit(token_for))
    return deps


def _default_agent(settings: Settings) -> AgentConfig | None:
    if not settings.agent_command:
        return None
    return AgentConfig(backend="command", command=Command.of(settings.agent_command))


def build_runtime(settings: Settings, deps: Dependencies | None = None) -> Runtime:
    """The runtime with shared clients built once for the whole process."""
    deps = deps or shared_clients(settings)
    runtime = Runtime(
        make_engine(settings.database_url),
        build_registry(),
        worker_id=settings.worker_id,
        code_version=settings.code_version,
        deps=deps,
        fault_point=settings.fault_point,
        max_history_events=settings.max_history_events,
        concurrency=settings.concurrency,
        reconcile_interval=settings.reconcile_interval,
        relay_grace=settings.relay_grace,
        worker_silence=settings.worker_silence,
        db_patience=settings.db_patience,
    )
    deps.add(runtime)  # activities that start or signal other runs use it
    return runtime


#: Longer than any activity's start-to-close timeout, so only orphans are swept.
WORKSPACE_MAX_AGE = 7 * 3600.0


async def sweep_orphan_workspaces(settings: Settings, every: float = 3600.0) -> None:
    """Remove workspaces a crashed worker left behind (activities remove their own)."""
    while True:
        removed = await asyncio.to_thread(
            sweep_workspaces, settings.workspaces_dir, older_than=WORKSPACE_MAX_AGE
        )
        if removed:
            log.info("removed %d orphaned workspaces", len(removed))
        await asyncio.sleep(every)


async def run_worker(settings: Settings) -> int:
    sweeper = asyncio.create_task(sweep_orphan_workspaces(settings), name="workspace-sweeper")
    try:
        return await _run_worker(settings)
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper


async def _run_worker(settings: Settings) -> int:
    runtime = build_runtime(settings)
    if not settings.redis_url:
        log.info("no REDIS_URL: running jobs in this process")
        await runtime.start_in_process()
        await until_stopped()
        log.info("stopping: draining for up to %.0fs", settings.drain_grace)
        await runtime.stop(grace=settings.drain_grace)
        return 0
    return await serve_arq(
        runtime,
        settings.redis_url,
        concurrency=settings.concurrency,
        reconcile_interval=settings.reconcile_interval,
        drain_grace=settings.drain_grace,
    )


async def until_stopped() -> None:
    """Wait for SIGTERM (a deploy) or SIGINT."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()


async def serve_arq(
    runtime: Runtime,
    redis_url: str,
    *,
    concurrency: int,
    reconcile_interval: float,
    drain_grace: float,
    poll_delay: float = 0.005,
    eager: bool = True,
) -> int:
    """Work arq's queues on ``redis_url`` until SIGTERM, then drain and return 0."""
    pool = await connect(redis_url)
    runtime.use_dispatcher(ArqDispatcher(pool), eager=eager)
    runtime.start_liveness()
    # The reconciler runs here, not as an arq cron: recovery goes on while Redis is away.
    runtime.reconciler.start(reconcile_interval)
    consumers = ArqConsumers(
        runtime, redis_settings(redis_url), max_jobs=concurrency, poll_delay=poll_delay
    )
    consumers.start()
    log.info("arq consumers on queues %s", consumers.queues)
    try:
        await until_stopped()
        # A deploy: take no new jobs, let running ones finish within the grace
        # period, hand back the rest, mark this worker retired, exit 0.
        log.info("stopping: draining for up to %.0fs", drain_grace)
        consumers.pause()
        await runtime.stop(grace=drain_grace)
    finally:
        await consumers.stop()
        await pool.aclose()
    log.info("worker %s retired", runtime.worker_id)
    return 0
