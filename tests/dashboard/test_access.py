"""Who may see and do what: the public listener, sign-in with GitHub through
the emulator, per-repository visibility and write access, CSRF, API tokens."""

from __future__ import annotations

import asyncio
import re
import time
from urllib.parse import quote

import httpx
from sqlalchemy import Engine

from app.config import Settings
from app.demo.serve import ServerThread, bind
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.operations.api_tokens import create_token, list_tokens, revoke_token
from app.web import create_app
from app.web.live import MAX_STREAMS_PER_SESSION
from app.web.session import SESSION_COOKIE, SessionCodec
from handlers import build_router
from tests.dashboard.conftest import GITHUB, World
from tests.dashboard.support import SESSION_SECRET, settle, waiting_repair


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


async def test_a_copy_of_the_cookie_is_refused_after_sign_out(world: World) -> None:
    """Sign-out ends the sign-in server side, for every web process: a copy of
    the cookie taken before (another tab, a stolen profile) no longer works."""
    async with world.browser() as client:
        await world.sign_in(client, world.people.reader)
        copied = client.cookies.get(SESSION_COOKIE)
        assert copied
        page = await client.get("/runs")
        assert page.status_code == 200
        await client.post("/logout", data={"csrf": _csrf(page.text)})
    # Another web process (a fresh app over the same database) and the copy.
    other = create_app(
        world.settings,
        world.runtime,
        github_transport=httpx.ASGITransport(app=world.emulator.asgi()),
        router=build_router(),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=other), base_url="http://repairbot.test"
    ) as thief:
        thief.cookies.set(SESSION_COOKIE, copied)
        assert (await thief.get("/runs")).status_code == 303
        assert (await thief.get("/api/runs")).status_code == 401
    # The GitHub user token inside the cookie was revoked at GitHub as well.
    session = SessionCodec(SESSION_SECRET, max_age=3600).load(copied)
    assert session is not None
    async with world.browser() as client:
        me = await client.get(
            f"{GITHUB}/user", headers={"authorization": f"Bearer {session.github_token}"}
        )
    assert me.status_code == 401


async def _start_named(world: World, repo: str, repo_id: int | None, number: int) -> str:
    started = await world.runtime.start_workflow(
        "repair",
        f"repair:{repo}#{number}",
        {"repo": repo, "repo_id": repo_id, "issue_number": number, "evidence": []},
    )
    await settle(world.runtime, [started.run_id])
    return started.run_id


async def test_runs_are_authorized_by_repository_id_not_name(world: World) -> None:
    owner = world.people.owner
    widgets_id = world.emulator.store.repos[f"{owner}/widgets"].id
    # A run of another repository that held the name "widgets" before.
    squatted = await _start_named(world, f"{owner}/widgets", widgets_id + 1000, 7)
    # A run of widgets recorded under an older name (since renamed).
    renamed = await _start_named(world, f"{owner}/old-widgets", widgets_id, 8)
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        assert (await client.get(f"/api/runs/{quote(squatted, safe='')}")).status_code == 404
        assert (await client.get(f"/api/runs/{quote(renamed, safe='')}")).status_code == 200
        listed = {r["run_id"] for r in (await client.get("/api/runs")).json()["runs"]}
        assert renamed in listed and squatted not in listed
        acted = await client.post(
            f"/api/runs/{quote(squatted, safe='')}/actions/cancel",
            json={"reason": "x"},
            headers={"x-csrf-token": _csrf((await client.get("/runs")).text)},
        )
        assert acted.status_code == 404


async def test_live_streams_need_a_visible_run_and_are_capped_per_sign_in(
    world: World,
) -> None:
    widgets = quote(world.runs["widgets#1"], safe="")
    secret = quote(world.runs["secret#1"], safe="")
    async with world.browser() as client:
        await world.sign_in(client, world.people.stranger)
        # Signed in, but sees no repository: no stream at all.
        assert (await client.get(f"/runs/{widgets}/live")).status_code == 403
    async with world.browser() as client:
        await world.sign_in(client, world.people.reader)
        cookie = client.cookies.get(SESSION_COOKIE)
        # A run of a repository the reader cannot see: not found, no stream.
        assert (await client.get(f"/runs/{secret}/live")).status_code == 404
        assert (await client.get(f"/runs/live?run={secret}")).status_code == 404
    # Open streams need a real server (the in-process transport waits for the end).
    server = ServerThread(world.app, bind(), name="web").start()
    try:
        async with httpx.AsyncClient(
            base_url=server.url, cookies={SESSION_COOKIE: cookie or ""}
        ) as reader:
            streams = [
                await reader.send(reader.build_request("GET", f"/runs/{widgets}/live"), stream=True)
                for _ in range(MAX_STREAMS_PER_SESSION)
            ]
            assert [s.status_code for s in streams] == [200] * MAX_STREAMS_PER_SESSION
            over = await reader.get(f"/runs/live?run={widgets}")
            assert over.status_code == 429
            await streams[0].aclose()
            # A closed stream gives its slot back (the server notices the disconnect).
            deadline = time.monotonic() + 20
            while True:
                again = await reader.send(
                    reader.build_request("GET", f"/runs/{widgets}/live"), stream=True
                )
                await again.aclose()
                if again.status_code == 200:
                    break
                assert again.status_code == 429
                assert time.monotonic() < deadline, "the slot never came back"
                await asyncio.sleep(0.05)
            for stream in streams[1:]:
                await stream.aclose()
    finally:
        server.stop()


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
