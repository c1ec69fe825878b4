"""Worker processes: arq over Redis (production) or in-process (embedded)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping

import httpx
from arq import create_pool
from arq.connections import RedisSettings
from sqlalchemy import Engine

from activities.github import GitHubAccess
from activities.workspace import InstallationGit
from app.agent.factory import AgentPolicy
from app.agent.http import AgentHttp
from app.commands import Sandbox
from app.config import Settings
from app.engine.activity_context import Dependencies
from app.engine.arq_dispatch import ArqDispatcher, arq_workers
from app.engine.db import make_engine
from app.engine.runtime import Runtime
from app.evidence import open_evidence_store
from app.evidence.collect import collect_unreferenced
from app.github.client import GitHubClientFactory
from app.registry import build_registry
from app.repo_config import AgentConfig, Command
from app.workspace import sweep_workspaces

log = logging.getLogger("repairbot.worker")


def shared_clients(settings: Settings, engine: Engine) -> Dependencies:
    """Clients built once per process and handed to every activity."""
    deps = Dependencies(
        settings,
        open_evidence_store(settings, engine),
        Sandbox(),
        AgentPolicy.from_env(os.environ, default=_default_agent(settings)),
        # A client of its own: never one that carries GitHub credentials.
        AgentHttp(httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=15.0))),
    )
    if settings.github_app_id:
        factory = GitHubClientFactory.from_settings(settings)
        deps.add(GitHubAccess(factory, settings.github_git_url))

        async def token_for(installation_id: int, repo: str, permissions: Mapping[str, str]) -> str:
            token = await factory.installation_token(
                installation_id, repository=repo, permissions=permissions
            )
            return token.token

        deps.add(InstallationGit(token_for))
    return deps


def _default_agent(settings: Settings) -> AgentConfig | None:
    if not settings.agent_command:
        return None
    return AgentConfig(backend="command", command=Command.of(settings.agent_command))


def build_runtime(settings: Settings, deps: Dependencies | None = None) -> Runtime:
    """The runtime with shared clients built once for the whole process."""
    engine = make_engine(settings.database_url)
    deps = deps or shared_clients(settings, engine)
    runtime = Runtime(
        engine,
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


async def collect_evidence(settings: Settings, every: float = 6 * 3600.0) -> None:
    """Delete artifacts no run refers to, once past their retention (safe on
    every worker at once; see app/evidence/collect.py). A pass is rare, so it
    opens its own connection rather than hold one in the pool between passes."""
    while True:
        engine = make_engine(settings.database_url, pool_size=1)
        try:
            report = await asyncio.to_thread(
                collect_unreferenced, engine, retention=settings.evidence_retention
            )
            if report.deleted:
                log.info("collected %d unreferenced artifacts", report.deleted)
        except Exception:
            log.exception("evidence collection failed; next pass in %.0fs", every)
        finally:
            engine.dispose()
        await asyncio.sleep(every)


async def run_worker(settings: Settings) -> int:
    sweeper = asyncio.create_task(sweep_orphan_workspaces(settings), name="workspace-sweeper")
    collector: asyncio.Task[None] | None = None
    if settings.evidence_store == "database":
        collector = asyncio.create_task(collect_evidence(settings), name="evidence-gc")
    try:
        return await _run_worker(settings)
    finally:
        for task in (sweeper, collector):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _run_worker(settings: Settings) -> int:
    runtime = build_runtime(settings)
    if not settings.redis_url:
        log.info("no REDIS_URL: running jobs in this process")
        await runtime.start_in_process()
        try:
            await asyncio.Event().wait()
        finally:
            await runtime.stop()
        return 0
    redis_settings = RedisSettings.from_dsn(settings.redis_url)
    pool = await create_pool(redis_settings)
    runtime.use_dispatcher(ArqDispatcher(pool), eager=True)
    runtime.start_liveness()
    workers = arq_workers(runtime, redis_settings, max_jobs=settings.concurrency)
    log.info("arq workers on queues %s", [w.queue_name for w in workers])
    try:
        await asyncio.gather(*(w.async_run() for w in workers))
    finally:
        await runtime.stop()
        for worker in workers:
            # arq's close() re-raises the CancelledError of a job it just cancelled;
            # that must not leave the other workers and the pool unclosed.
            with contextlib.suppress(asyncio.CancelledError):
                await worker.close()
        await pool.aclose()
    return 0
