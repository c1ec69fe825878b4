from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.evidence import open_evidence_store
from app.web import create_app
from emulator.app import Emulator
from emulator.client import EmulatorClient
from handlers import build_router
from tests.dashboard.support import (
    ACTIVITIES,
    PATCH,
    REPRO_LOG,
    SESSION_SECRET,
    People,
    settle,
    waiting_repair,
)

GITHUB = "http://github.test"
REPAIRBOT = "http://repairbot.test"


@dataclass
class World:
    gh: EmulatorClient
    runtime: Runtime
    settings: Settings
    people: People
    app: Any
    runs: dict[str, str]
    emulator: Emulator

    def browser(self) -> httpx.AsyncClient:
        """A client that reaches both sites and keeps cookies, as a browser does."""
        return httpx.AsyncClient(
            mounts={
                GITHUB: httpx.ASGITransport(app=self.emulator.asgi()),
                REPAIRBOT: httpx.ASGITransport(app=self.app),
            },
            base_url=REPAIRBOT,
        )

    async def sign_in(self, client: httpx.AsyncClient, login: str) -> httpx.Response:
        """Walk the whole OAuth web flow, answering GitHub's sign-in page as ``login``."""
        start = await client.get("/login?next=/runs")
        assert start.status_code == 303
        authorize = await client.get(start.headers["location"])
        assert authorize.status_code == 200, authorize.text
        fields = dict(httpx.QueryParams(start.headers["location"].split("?", 1)[1]))
        back = await client.post(
            f"{GITHUB}/login/oauth/authorize",
            data={
                "client_id": fields["client_id"],
                "redirect_uri": fields["redirect_uri"],
                "state": fields["state"],
                "login": login,
            },
        )
        assert back.status_code == 302, back.text
        return await client.get(back.headers["location"])


async def populate(gh: EmulatorClient, people: People, tmp_path: Any) -> Any:
    """People, two repositories (one private) and the App installed on both."""
    for login in (people.owner, people.maintainer, people.reader, people.stranger):
        await gh.create_user(login)
    source = tmp_path / "src"
    source.mkdir()
    (source / "README.md").write_text("hello\n")
    for name in ("widgets", "secret"):
        await gh.create_repo_from_folder(people.owner, name, source, private=name == "secret")
    await gh.set_permission(people.owner, "widgets", people.maintainer, "write")
    await gh.set_permission(people.owner, "widgets", people.reader, "read")
    registered = await gh.create_app(name="repairbot")
    await gh.create_installation(registered.id, people.owner)
    return registered


def sign_in_settings(registered: Any, tmp_path: Any, *, github: str, public: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        github_api_url=github,
        github_web_url=github,
        public_url=public,
        github_client_id=registered.client_id,
        github_client_secret=registered.client_secret,
        session_secret=SESSION_SECRET,
        github_webhook_secret="hook-secret",
    )


#: The issue titles the runs of :func:`start_runs` received (the runs list shows them).
TITLES = {
    "widgets#1": "add() subtracts instead of adding",
    "secret#1": "Secret service leaks nothing",
    "widgets#2": "Crash when the list is empty",
}


async def start_runs(runtime: Runtime, settings: Settings, people: People) -> dict[str, str]:
    """Three waiting repair runs (two in widgets, one in secret) with evidence."""
    evidence = open_evidence_store(settings, runtime.engine)
    patch = evidence.put(PATCH.encode(), kind="patch", name="fix.diff").model_dump()
    log = evidence.put(REPRO_LOG.encode(), kind="reproduce", name="reproduce.log").model_dump()
    runs = {}
    for name, number in (("widgets", 1), ("secret", 1), ("widgets", 2)):
        repo = f"{people.owner}/{name}"
        started = await runtime.start_workflow(
            "repair",
            f"repair:{repo}#{number}",
            {
                "repo": repo,
                "issue_number": number,
                "issue_title": TITLES[f"{name}#{number}"],
                "evidence": [
                    {"label": "reproduction on the base commit", "ref": log},
                    {"label": "patch, attempt 1", "ref": patch},
                ],
            },
        )
        runs[f"{name}#{number}"] = started.run_id
    return runs


def registry() -> Registry:
    return Registry.of([waiting_repair], ACTIVITIES)


async def build_world(db_engine: Engine, tmp_path: Any) -> AsyncIterator[World]:
    emulator = Emulator(root=tmp_path / "github")
    transport = httpx.ASGITransport(app=emulator.asgi())
    gh = EmulatorClient(GITHUB, transport=transport)
    people = People()
    registered = await populate(gh, people, tmp_path)
    settings = sign_in_settings(registered, tmp_path, github=GITHUB, public=REPAIRBOT)
    runtime = Runtime(db_engine, registry(), reconcile_interval=0.1)
    await runtime.start_in_process()
    runs = await start_runs(runtime, settings, people)
    await settle(runtime, list(runs.values()))
    app = create_app(settings, runtime, github_transport=transport, router=build_router())
    try:
        yield World(gh, runtime, settings, people, app, runs, emulator)
    finally:
        await runtime.stop()
        await gh.aclose()
        emulator.close()


@pytest.fixture
async def world(db_engine: Engine, tmp_path: Any) -> AsyncIterator[World]:
    async for w in build_world(db_engine, tmp_path):
        yield w
