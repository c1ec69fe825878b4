"""Worker processes: arq over Redis (production) or in-process (embedded)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

import httpx
from sqlalchemy import Engine

from activities.agent import AgentActivities, AgentTools
from activities.approval import ApprovalActivities
from activities.config_check import ConfigCheckActivities
from activities.example import ExampleActivities
from activities.github import GitHubAccess, GitHubActivities
from activities.installation_caps import InstallationCapsActivities
from activities.onboarding import OnboardingActivities
from activities.repo_commands import RepoCommandActivities
from activities.runs import RunActivities
from activities.suspension import suspended
from activities.triage import TriageActivities
from activities.trigger_config import TriggerConfigActivities
from activities.workspace import (
    Checkouts,
    GitCredentials,
    InstallationGit,
    WorkspaceActivities,
)
from app.agent.factory import AgentPolicy
from app.agent.http import AgentHttp
from app.agent.proxy import ModelProxy
from app.config import Settings
from app.engine import (
    PermanentError,
    Registry,
    Runtime,
    freeze_startup_heap,
    make_engine,
    serve_arq,
    until_stopped,
)
from app.evidence import EvidenceStore, open_evidence_store
from app.evidence.collect import collect_unreferenced
from app.github.auth import InstallationToken
from app.github.client import GitHubClientFactory
from app.github.objcache import ObjectCache, sweep_dead_caches
from app.intake.reconciler import DeliveryReconciler
from app.main.catalog import build_registry
from app.main.children import watch_children_without_threads
from app.main.startup_line import log_startup
from app.operations.metrics import metered_transport
from app.repo_config import AgentConfig, Command
from app.sandbox.runner import ResourceLimits, Sandbox
from app.secrets import KnownSecrets, RedactingFilter
from app.workspace import sweep_workspaces

log = logging.getLogger("repairbot.worker")


@dataclass(frozen=True)
class WorkerClients:
    """Clients built once per process; each activity object is given the ones it needs."""

    settings: Settings
    evidence: EvidenceStore
    #: Without a GitHub App (``GITHUB_APP_ID``), a stand-in whose use fails.
    github: GitHubAccess
    #: The workspace, command and agent activities' (settings, evidence, sandbox, git).
    checkouts: Checkouts
    agent: AgentTools


class _NoGitHubApp:
    """GitHub access in a worker without a GitHub App: it starts (and runs
    what needs no GitHub), and a GitHub activity fails saying why."""

    def __getattr__(self, name: str) -> Any:
        raise PermanentError("this worker has no GitHub App: set GITHUB_APP_ID")


def register_activities(registry: Registry, clients: WorkerClients, runtime: Runtime) -> None:
    """Give the registry every activity body, each with its dependencies."""
    store = runtime.store
    registry.register_activities(ExampleActivities())
    for activities in checkout_activities(clients.checkouts, clients.agent):
        registry.register_activities(activities)
    registry.register_activities(InstallationCapsActivities(clients.settings, store))
    registry.register_activities(ApprovalActivities(clients.evidence))
    registry.register_activities(
        GitHubActivities(clients.github, clients.evidence, clients.settings)
    )
    registry.register_activities(TriageActivities(clients.github))
    registry.register_activities(ConfigCheckActivities(clients.github))
    registry.register_activities(TriggerConfigActivities(clients.github))
    registry.register_activities(OnboardingActivities(clients.github, clients.evidence))
    # The old workflow versions' way to start or signal other runs.
    registry.register_activities(RunActivities(runtime))


def checkout_activities(checkouts: Checkouts, agent: AgentTools) -> list[object]:
    """The activities that work in a checkout (a test stack registers them
    again to change their sandbox)."""
    return [
        WorkspaceActivities(checkouts),
        RepoCommandActivities(checkouts),
        AgentActivities(replace(agent, checkouts=checkouts)),
    ]


def shared_clients(settings: Settings, engine: Engine) -> WorkerClients:
    """Clients built once per process and handed to the activities."""
    policy = replace(
        AgentPolicy.from_env(dict(settings.agent_env), default=_default_agent(settings)),
        command_network=settings.agent_network,
    )
    # A client of its own: never one that carries GitHub credentials.
    agent_http = AgentHttp(httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=15.0)))
    # Every secret this worker holds, redacted from what agents produce and
    # from the logs; installation tokens are added as they are minted.
    known = KnownSecrets.from_env(settings.secret_env(), extra=policy.secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(known))
    evidence = open_evidence_store(settings, engine)
    sandbox = Sandbox(
        isolation=settings.isolation(),
        egress=settings.egress_policy(),
        limits=ResourceLimits(disk_quota=settings.disk_quota()),
    )
    credentials = GitCredentials()
    access = cast(GitHubAccess, _NoGitHubApp())
    # One per process, shared by the workspace and the GitHub activities
    # (only GitHub's fetches are cached: they name a repository id).
    objects = ObjectCache(settings.git_cache_dir)
    if settings.github_app_id:
        factory = GitHubClientFactory.from_settings(
            settings, transport=metered_transport(settings.github_api_url), engine=engine
        )
        access = GitHubAccess(factory, settings.github_git_url, objects)

        async def token_for(
            installation_id: int, repo: str, permissions: Mapping[str, str]
        ) -> InstallationToken:
            token = await factory.installation_token(
                installation_id, repository=repo, permissions=permissions
            )
            known.add_short_lived(token.token)
            return token

        async def is_suspended(installation_id: int) -> bool:
            return await suspended(factory, installation_id)

        credentials = InstallationGit(token_for, is_suspended)
    checkouts = Checkouts(settings, evidence, sandbox, credentials, objects)
    agent = AgentTools(
        checkouts,
        policy=policy,
        http=agent_http,
        # The operator's command agent reaches its model through this (app/agent/proxy.py).
        proxy=ModelProxy(client=agent_http.client),
        secrets=known,
    )
    return WorkerClients(
        settings=settings,
        evidence=evidence,
        github=access,
        checkouts=checkouts,
        agent=agent,
    )


def _default_agent(settings: Settings) -> AgentConfig | None:
    if not settings.agent_command:
        return None
    return AgentConfig(backend="command", command=Command.of(settings.agent_command))


def build_runtime(
    settings: Settings, clients: WorkerClients | None = None, *, engine: Engine | None = None
) -> Runtime:
    """The runtime with shared clients built once for the whole process
    (``clients`` built on ``engine``, when given)."""
    engine = engine or make_engine(settings.database_url)
    clients = clients or shared_clients(settings, engine)
    registry = build_registry()
    runtime = Runtime(
        engine,
        registry,
        worker_id=settings.worker_id,
        code_version=settings.code_version,
        fault_point=settings.fault_point,
        max_history_events=settings.max_history_events,
        concurrency=settings.concurrency,
        reconcile_interval=settings.reconcile_interval,
        relay_grace=settings.relay_grace,
        worker_silence=settings.worker_silence,
        db_patience=settings.db_patience,
    )
    register_activities(registry, clients, runtime)
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
        caches = await asyncio.to_thread(sweep_dead_caches, settings.git_cache_dir)
        if caches:
            log.info("removed %d git object caches of workers gone", len(caches))
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


def delivery_reconciler(settings: Settings) -> DeliveryReconciler | None:
    """The periodic delivery reconciler, when the App is configured and it is on."""
    if not settings.github_app_id or settings.delivery_reconcile_interval <= 0:
        return None
    return DeliveryReconciler(
        make_engine(settings.database_url, pool_size=2),
        GitHubClientFactory.from_settings(settings),
        interval=settings.delivery_reconcile_interval,
        holder=settings.worker_id,
    )


@contextlib.asynccontextmanager
async def background(name: str, work: Coroutine[Any, Any, None] | None) -> AsyncIterator[None]:
    """Run ``work`` beside the block; cancelled when the block exits."""
    task = asyncio.create_task(work, name=name) if work is not None else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run_worker(settings: Settings) -> int:
    # Before anything starts a subprocess: no thread per git or sandbox command.
    watch_children_without_threads()
    log_startup(settings, role="worker")
    sweeper = asyncio.create_task(sweep_orphan_workspaces(settings), name="workspace-sweeper")
    collector: asyncio.Task[None] | None = None
    if settings.evidence_store == "database":
        collector = asyncio.create_task(collect_evidence(settings), name="evidence-gc")

    reconciler = delivery_reconciler(settings)
    try:
        async with background(
            "delivery-reconciler", reconciler.run_forever() if reconciler else None
        ):
            return await _run_worker(settings)
    finally:
        for task in (sweeper, collector):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _run_worker(settings: Settings) -> int:
    engine = make_engine(settings.database_url)
    clients = shared_clients(settings, engine)
    runtime = build_runtime(settings, clients, engine=engine)
    try:
        return await _serve(settings, runtime)
    finally:
        # Private repositories' objects do not outlive the worker that needed them.
        if clients.checkouts.objects is not None:
            clients.checkouts.objects.close()


async def _serve(settings: Settings, runtime: Runtime) -> int:
    # Everything long-lived is built: keep it out of the collector's full
    # passes, which otherwise stall the event loop for 100+ ms (app/engine/_heap.py).
    freeze_startup_heap()
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
        poll_delay=settings.arq_poll_delay,
    )
