"""The activities under the real durable runtime (SQLite): JSON in, JSON out.

A small workflow strings them together the way the repair workflow will:
prepare, reproduce on the base, propose with a real command agent, verify
in a fresh workspace. It proves the inputs and results survive history and
that a worker with the shared clients runs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from activities.repo_commands import RepoCommandActivities
from app.agent import AgentPolicy
from app.config import Settings
from app.contracts.agent import propose_fix
from app.contracts.repo_commands import run_reproduction, verify_candidate
from app.contracts.workspace import WorkspaceSpec, prepare_workspace
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityError
from app.engine._registry import Registry, workflow
from app.engine._runtime import Runtime
from app.evidence import FolderEvidenceStore
from app.sandbox.runner import Sandbox
from tests.activities.support import Dependencies, bodies, checkouts_of
from tests.agent.sample_repo import FIX_ARGV, REPRO_ARGV, TEST_ARGV, SampleRepo

CONFIG = f"""
reproduce: {REPRO_ARGV!r}
test: {TEST_ARGV!r}
agent:
  backend: command
  command: {FIX_ARGV!r}
budgets: {{time_limit_seconds: 60}}
"""


@workflow("test.repair_flow")
async def repair_flow(ctx: WorkflowContext, job: dict[str, Any]) -> dict[str, Any]:
    spec = job["workspace"]
    prepared = await ctx.activity(
        prepare_workspace, {"workspace": spec, "issue_body": job["issue_body"]}, step="prepare"
    )
    config = prepared["config"]
    limit = config["budgets"]["time_limit_seconds"]
    repro = await ctx.activity(
        run_reproduction,
        {
            "workspace": spec,
            "setup": config["setup"],
            "commands": prepared["reproduction"],
            "time_limit_seconds": limit,
        },
        step="reproduce",
    )
    proposal = await ctx.activity(
        propose_fix,
        {
            "workspace": spec,
            "agent": config["agent"],
            "issue_title": job["issue_title"],
            "issue_body": job["issue_body"],
            "reproduction": prepared["reproduction"],
            "reproduction_log": repro["log"],
            "setup": config["setup"],
            "time_limit_seconds": limit,
            "tool_retries": config["budgets"]["tool_retries"],
        },
        step="propose-1",
    )
    verdict = await ctx.activity(
        verify_candidate,
        {
            "workspace": {**spec, "patch": proposal["patch"]},
            "setup": config["setup"],
            "reproduction": prepared["reproduction"],
            "test": config["test"],
            "time_limit_seconds": limit,
        },
        step="verify-1",
    )
    return {
        "reproduced": repro["reproduced"],
        "outcome": proposal["outcome"],
        "patch": proposal["patch"],
        "verdict": verdict["verdict"],
        "evidence": [verdict["reproduction"]["log"], verdict["tests"]["log"]],
    }


@workflow("test.bad_input")
async def bad_input(ctx: WorkflowContext, job: dict[str, Any]) -> dict[str, Any]:
    try:
        # No commands: the input is invalid, a permanent failure.
        await ctx.activity(run_reproduction, {"workspace": job["workspace"]}, step="reproduce")
    except ActivityError as exc:
        return {"class": exc.failure_class, "attempts": exc.attempts, "type": exc.error_type}
    return {}


@pytest.fixture
async def runtime_for(db_engine: Engine) -> AsyncIterator[Callable[..., Awaitable[Runtime]]]:
    started: list[Runtime] = []

    async def start(registry: Registry) -> Runtime:
        runtime = Runtime(db_engine, registry, reconcile_interval=0.05, relay_grace=0.2)
        await runtime.start_in_process()
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        await runtime.stop()


# The engine's own suite covers both databases; SQLite is enough to show the
# activities' inputs and results live in history.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_reproduce_propose_verify_under_the_runtime(
    runtime_for: Callable[..., Awaitable[Runtime]], tmp_path: Path, sample_repo: SampleRepo
) -> None:
    sha = sample_repo.commit({".github/repairbot.yml": CONFIG}, "configure repairbot")
    settings = Settings(data_dir=tmp_path / "data")
    evidence = FolderEvidenceStore(settings.evidence_dir)
    registry = Registry.of([repair_flow, bad_input])
    # The repository's config names the agent: allowed here, as the operator may.
    policy = AgentPolicy(repository_commands=True)
    deps = Dependencies(settings, evidence, Sandbox(heartbeat_interval=0.2), policy)
    for activities in bodies(deps):
        registry.register_activities(activities)
    runtime = await runtime_for(registry)
    spec = WorkspaceSpec(repo="octo/calc", clone_url=sample_repo.url, base_sha=sha)
    job = {
        "workspace": spec.model_dump(mode="json"),
        "issue_title": "add() subtracts",
        "issue_body": "add(2, 3) is -1",
    }
    await runtime.start_workflow("test.repair_flow", "calc-issue-7", job)
    run = await runtime.wait_for("calc-issue-7", timeout=60)
    assert run.status == "completed", run
    assert run.result["reproduced"] is True and run.result["outcome"] == "proposed"
    assert run.result["verdict"] == "verified"
    assert b"+    return a + b" in evidence.get(run.result["patch"]["sha256"])
    assert all(evidence.exists(ref["sha256"]) for ref in run.result["evidence"])
    assert list(settings.workspaces_dir.iterdir()) == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_malformed_input_fails_at_once(
    runtime_for: Callable[..., Awaitable[Runtime]], tmp_path: Path, sample_repo: SampleRepo
) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    registry = Registry.of([bad_input])
    deps = Dependencies(settings, FolderEvidenceStore(settings.evidence_dir))
    registry.register_activities(RepoCommandActivities(checkouts_of(deps)))
    runtime = await runtime_for(registry)
    spec = WorkspaceSpec(repo="octo/calc", clone_url=sample_repo.url, base_sha=sample_repo.base_sha)
    await runtime.start_workflow("test.bad_input", "bad-1", {"workspace": spec.model_dump()})
    run = await runtime.wait_for("bad-1", timeout=30)
    assert run.result == {"class": "permanent", "attempts": 1, "type": "PermanentError"}
