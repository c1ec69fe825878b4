"""The installation handlers start one onboarding run per repository the App
gains (keyed by repository id), and none when the operator turned it off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.contracts.onboarding import onboarding_workflow_id
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.main.web_process import build_router
from app.web import create_app
from tests.web.support import SECRET, STAND_INS, Poster, example


async def _poster(engine: Engine, *, onboarding: bool) -> AsyncIterator[tuple[Poster, Runtime]]:
    settings = Settings(github_webhook_secret=SECRET, onboarding=onboarding)
    runtime = Runtime(engine, Registry.of(STAND_INS))
    app = create_app(settings, runtime, router=build_router())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://repairbot"
    ) as client:
        yield Poster(client, SECRET), runtime


@pytest.fixture(params=[True, False], ids=["onboarding-on", "onboarding-off"])
async def posted(request: pytest.FixtureRequest, db_engine: Engine) -> AsyncIterator[Any]:
    async for pair in _poster(db_engine, onboarding=request.param):
        yield request.param, pair


async def test_installing_starts_one_onboarding_run_per_repository(posted: Any) -> None:
    enabled, (poster, runtime) = posted
    installed = example("installation", "created")
    repos = installed["repositories"]
    assert repos, "the example installs the App on some repositories"
    await poster.post("installation", installed, delivery="install-1")
    await poster.post("installation", installed, delivery="install-1")  # redelivered
    added = example("installation_repositories", "added")
    await poster.post("installation_repositories", added, delivery="added-1")
    expected = [*repos, *added["repositories_added"]]
    for repo in expected:
        run = runtime.store.find_run(onboarding_workflow_id(repo["id"]))
        if not enabled:
            assert run is None
            continue
        assert run is not None and run.input["repository_id"] == repo["id"]
        assert run.input["repo"] == repo["full_name"]
