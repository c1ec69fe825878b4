"""Who may see and do what: the public listener, sign-in with GitHub through
the emulator, per-repository visibility and write access, CSRF, API tokens."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
from sqlalchemy import Engine

from app.api_tokens import create_token, list_tokens, revoke_token
from app.config import Settings
from app.engine.registry import Registry
from app.engine.runtime import Runtime
from app.web import create_app
from handlers import build_router
from tests.dashboard.conftest import GITHUB, World
from tests.dashboard.support import waiting_repair


async def test_without_sign_in_only_the_webhook_health_and_metrics_are_served(
    db_engine: Engine,
) -> None:
    runtime = Runtime(db_engine, Registry.of([waiting_repair]))
    app = create_app(Settings(github_webhook_secret="x"), runtime, router=build_router())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://r"
    ) as client:
        assert (await client.get("/healthz")).status_code == 200
        for path in ("/", "/runs", "/api/runs", "/deliveries", "/login"):
            assert (await client.get(path)).status_code == 404, path
        # /metrics answers an operator token only (tests/dashboard/test_metrics_scrape.py).
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.post("/webhooks/github", content=b"{}")).status_code == 401


async def test_pages_and_api_ask_for_credentials(world: World) -> None:
    async with world.browser() as client:
        page = await client.get("/runs")
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=/runs"
        for path in (
            "/api/runs",
            "/metrics",
            f"/runs/{quote(world.runs['widgets#1'], safe='')}/live",
        ):
            answer = await client.get(path)
            assert answer.status_code == 401, path


async def test_sign_in_sets_a_protected_session_cookie(world: World) -> None:
    async with world.browser() as client:
        landed = await world.sign_in(client, world.people.reader)
        assert landed.status_code == 303
        assert landed.headers["location"] == "/runs"
        cookie = next(
            v for k, v in landed.headers.multi_items() if k == "set-cookie" and "session" in v
        )
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie
        # The cookie is encrypted: neither the login nor the GitHub token shows.
        assert world.people.reader not in cookie and "ghu_" not in cookie
        runs = await client.get("/runs")
        assert runs.status_code == 200
        assert "Signed in as <strong>@rick</strong>" in runs.text


async def test_a_state_that_does_not_match_is_refused(world: World) -> None:
    async with world.browser() as client:
        start = await client.get("/login")
        params = dict(httpx.QueryParams(start.headers["location"].split("?", 1)[1]))
        back = await client.post(
            f"{GITHUB}/login/oauth/authorize",
            data={**params, "state": "forged", "login": world.people.reader},
        )
        answer = await client.get(back.headers["location"])
        assert answer.status_code == 400
        assert "does not match" in answer.text
        # No login cookie at all (another browser): refused as well.
    async with world.browser() as other:
        answer = await other.get(f"/auth/callback?code=x&state={params['state']}")
        assert answer.status_code == 400


async def test_people_see_only_repositories_they_can_read(world: World) -> None:
    widgets = {world.runs["widgets#1"], world.runs["widgets#2"]}
    secret = world.runs["secret#1"]
    expectations = {
        world.people.owner: widgets | {secret},
        world.people.maintainer: widgets,
        world.people.reader: widgets,
        world.people.stranger: set(),
    }
    for login, expected in expectations.items():
        async with world.browser() as client:
            await world.sign_in(client, login)
            listed = (await client.get("/api/runs")).json()
            assert {r["run_id"] for r in listed["runs"]} == expected, login
            page = await client.get("/runs")
            assert (secret in page.text) == (secret in expected), login
            direct = await client.get(f"/runs/{quote(secret, safe='')}")
            assert direct.status_code == (200 if secret in expected else 404), login


async def test_actions_need_write_access_and_the_csrf_token(world: World) -> None:
    run_id = world.runs["widgets#1"]
    async with world.browser() as client:
        await world.sign_in(client, world.people.reader)
        page = await client.get(f"/runs/{quote(run_id, safe='')}")
        assert "not act on it" in page.text
        csrf = _csrf(page.text)
        refused = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "cancel", "reason": "x", "csrf": csrf},
        )
        assert refused.status_code == 403
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get(f"/runs/{quote(run_id, safe='')}")
        csrf = _csrf(page.text)
        forged = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "cancel", "reason": "x", "csrf": "wrong"},
        )
        assert forged.status_code == 403
        cross_site = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "cancel", "reason": "x", "csrf": csrf},
            headers={"origin": "http://evil.test"},
        )
        assert cross_site.status_code == 403
        assert world.runtime.store.load_run(run_id).status == "running"  # type: ignore[union-attr]
        done = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "cancel", "reason": "wrong issue", "csrf": csrf},
        )
        assert done.status_code == 303
        run = await world.runtime.wait_for(run_id, statuses=("cancelled", "completed"))
        assert run.status == "cancelled"
        events = world.runtime.store.load_events(run_id)
        requested = [e for e in events if e.type == "cancel_requested"]
        assert requested[0].data == {"reason": "wrong issue", "by": "@maya"}


async def test_sign_out_needs_the_csrf_token_and_ends_the_session(world: World) -> None:
    async with world.browser() as client:
        await world.sign_in(client, world.people.reader)
        page = await client.get("/runs")
        assert (await client.post("/logout", data={"csrf": "nope"})).status_code == 403
        out = await client.post("/logout", data={"csrf": _csrf(page.text)})
        assert out.status_code == 303
        assert (await client.get("/runs")).status_code == 303


async def test_operator_tokens_are_stored_hashed_scoped_and_revocable(world: World) -> None:
    store = world.runtime.store
    reader = create_token(store, "ci", {"read"})
    scraper = create_token(store, "prometheus", {"metrics"})
    with store.engine.connect() as conn:
        dump = repr(conn.exec_driver_sql("select * from api_tokens").all())
    assert reader not in dump and scraper not in dump
    async with world.browser() as client:
        as_reader = {"authorization": f"Bearer {reader}"}
        as_scraper = {"authorization": f"Bearer {scraper}"}
        listed = await client.get("/api/runs", headers=as_reader)
        assert listed.status_code == 200 and listed.json()["total"] == 3
        assert (await client.get("/metrics", headers=as_reader)).status_code == 403
        metrics = await client.get("/metrics", headers=as_scraper)
        assert metrics.status_code == 200
        assert 'repairbot_runs{status="running"} 3.0' in metrics.text
        assert (await client.get("/api/runs", headers=as_scraper)).status_code == 403
        act = await client.post(
            f"/api/runs/{quote(world.runs['widgets#1'], safe='')}/actions/cancel",
            json={"reason": "x"},
            headers=as_reader,
        )
        assert act.status_code == 403
        assert revoke_token(store, "ci")
        assert (await client.get("/api/runs", headers=as_reader)).status_code == 401
        bogus = {"authorization": "Bearer rbt_not-a-token"}
        assert (await client.get("/api/runs", headers=bogus)).status_code == 401
    names = {t.name: t for t in list_tokens(store)}
    assert names["ci"].revoked_at is not None and names["prometheus"].last_used_at


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)
