"""``/metrics`` for a scraper (issue 22, point 7): a ``metrics`` token is
enough, with or without dashboard sign-in; labels hold no unbounded values;
``process_*`` and ``repairbot_build_info`` are there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.operations.api_tokens import create_token
from app.operations.metrics import route_of
from app.operations.metrics_db import PHASES, metric_phase
from app.version import package_version
from app.web import create_app
from handlers import build_router


@pytest.fixture
async def bare(db_engine: Engine) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """The web app with no sign-in configured at all."""
    settings = Settings(github_webhook_secret="s", code_version="abc123")
    assert not settings.sign_in_configured
    runtime = Runtime(db_engine, Registry.of([]))
    app = create_app(settings, runtime, router=build_router())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rb") as client:
        yield client, runtime


async def test_a_metrics_token_scrapes_without_sign_in(bare: Any) -> None:
    client, runtime = bare
    token = create_token(runtime.store, "prometheus", {"metrics"})
    answer = await client.get("/metrics", headers={"authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    text = answer.text
    assert (
        f'repairbot_build_info{{code_version="abc123",version="{package_version()}"}} 1.0' in text
    )
    assert "process_resident_memory_bytes" in text and "process_cpu_seconds_total" in text
    assert "repairbot_runs" in text


async def test_metrics_refuses_no_token_a_wrong_one_and_a_wrong_scope(bare: Any) -> None:
    client, runtime = bare
    reader = create_token(runtime.store, "reader", {"read"})
    assert (await client.get("/metrics")).status_code == 401
    bogus = {"authorization": "Bearer rbt_not-a-token"}
    assert (await client.get("/metrics", headers=bogus)).status_code == 401
    wrong = {"authorization": f"Bearer {reader}"}
    assert (await client.get("/metrics", headers=wrong)).status_code == 403
    # A session cookie is not looked at: nothing to forge or ride on.
    client.cookies.set("repairbot_session", "x")
    assert (await client.get("/metrics")).status_code == 401


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/users/alice", "/users/{name}"),
        ("/orgs/acme/installation", "/orgs/{name}/installation"),
        (
            "/repos/o/r/collaborators/alice/permission",
            "/repos/{owner}/{repo}/collaborators/{username}/permission",
        ),
        (
            "/repos/o/r/issues/3/labels/needs%20triage",
            "/repos/{owner}/{repo}/issues/{n}/labels/{name}",
        ),
        ("/repos/o/r/contents/src/a.py", "/repos/{owner}/{repo}/contents/{path}"),
        ("/repos/o/r/commits/main/status", "/repos/{owner}/{repo}/commits/{ref}/status"),
        ("/repos/o/r/git/matching-refs/heads/x", "/repos/{owner}/{repo}/git/matching-refs/{ref}"),
    ],
)
def test_every_path_parameter_becomes_its_template(path: str, route: str) -> None:
    assert route_of(path) == route


def test_the_phase_label_holds_phases_only() -> None:
    assert metric_phase("reproduce", "workspace.reproduce") == "reproducing"
    assert metric_phase("some-new-step", "activity.with_a_name") == "other"
    assert metric_phase("status-3", "github.status_comment") is None
    assert "other" not in PHASES and "activity.with_a_name" not in PHASES
