"""The composition root gives every activity its body and dependencies
(app/main/worker_process.py): a worker has a body for every contract its
workflows call, with or without a GitHub App, and the ``runs.*`` bodies act
on that worker's own runtime."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import pytest

from app.config import Settings
from app.contracts.ids import request_workflow_id
from app.engine import PermanentError
from app.main.worker_process import build_runtime, shared_clients, sweep_orphan_workspaces
from tests.workflows.repair_scenario import REQUEST


def test_a_worker_without_a_github_app_may_start_and_its_github_use_says_why_it_fails(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "worker.db"
    shutil.copy(sqlite_template, path)
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{path}")
    assert not settings.github_app_id
    runtime = build_runtime(settings)
    try:
        runtime.registry.check_implemented()  # every declared contract has its body
        clients = shared_clients(settings, runtime.engine)
        with pytest.raises(PermanentError, match="no GitHub App: set GITHUB_APP_ID"):
            _ = clients.github.factory
    finally:
        runtime.engine.dispose()


async def test_the_runs_bodies_start_and_describe_runs_on_the_workers_own_runtime(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "worker.db"
    shutil.copy(sqlite_template, path)
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{path}")
    runtime = build_runtime(settings)
    bodies = runtime.registry.activities
    try:
        # Nothing in these bodies reads the activity context.
        described = await bodies["runs.describe_repair"].fn(None, REQUEST)  # type: ignore[arg-type]
        assert described["exists"] is False
        first = await bodies["runs.start_repair"].fn(None, REQUEST)  # type: ignore[arg-type]
        again = await bodies["runs.start_repair"].fn(None, REQUEST)  # type: ignore[arg-type]
        assert first["created"] is True and again == {**first, "created": False}
        key = request_workflow_id(REQUEST["repo_id"], REQUEST["repo"], REQUEST["issue_number"])
        run = await runtime.read(runtime.store.find_run, key)
        assert run is not None and run.run_id == first["run_id"]
    finally:
        await runtime.stop()
        runtime.engine.dispose()


async def test_the_hourly_sweep_removes_the_git_object_cache_of_a_worker_gone(
    tmp_path: Path,
) -> None:
    """A worker killed outright never closes its cache: a live worker's sweep
    removes it (its lock is free), workspaces' sweep alike."""
    settings = Settings(data_dir=tmp_path / "data")
    dead = settings.git_cache_dir / "p1-dead"
    (dead / "1-100").mkdir(parents=True)
    (settings.git_cache_dir / "p1-dead.lock").write_text("")
    sweeper = asyncio.create_task(sweep_orphan_workspaces(settings, every=3600))
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while dead.exists():  # waits on recorded state: the first pass
            assert asyncio.get_running_loop().time() < deadline, "not swept"
            await asyncio.sleep(0.01)
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
    assert list(settings.git_cache_dir.iterdir()) == []
