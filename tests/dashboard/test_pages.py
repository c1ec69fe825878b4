"""The dashboard's pages: the runs list with filters and pagination, the run
page with its evidence and diff, raw evidence, live updates, deliveries."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import quote

from sqlalchemy import insert, select

from app.app_tables import WebhookDelivery
from app.web.session import SESSION_COOKIE
from tests.dashboard.conftest import World
from tests.dashboard.support import PATCH, settle
from tests.shared_data import WEBHOOK_EXAMPLES

deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]


def url(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


async def test_the_run_page_shows_state_evidence_and_the_diff(world: World) -> None:
    run_id = world.runs["widgets#1"]
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get(url(run_id))
        text = page.text
        assert page.status_code == 200
        assert 'data-field="status" aria-live="polite">running<' in text
        assert 'data-field="phase" aria-live="polite">awaiting-review<' in text
        assert 'href="http://github.test/octo/widgets/issues/1"' in text
        assert 'href="http://github.test/octo/widgets/pull/2"' in text
        assert "1 of 3" in text  # repair attempts against the budget
        assert "1200 in, 340 out" in text  # agent tokens
        assert "<strong>reproducing</strong>" in text and "<strong>repairing</strong>" in text
        assert '<th scope="row">propose-1</th><td>agent.propose_fix</td><td>1</td>' in text
        # The patch, rendered as a diff, one classed line each.
        assert '<span class="del">-    return a - b</span>' in text
        assert '<span class="add">+    return a + b</span>' in text
        assert "FAILED tests/test_calc.py::test_add" in text
        for action in ("cancel", "terminate"):
            assert f'name="action" value="{action}"' in text
        # Raw evidence of this run, served as inert text.
        sha = text.split("/evidence/")[1].split('"')[0]
        raw = await client.get(f"{url(run_id)}/evidence/{sha}")
        assert raw.headers["content-type"].startswith("text/plain")
        assert raw.headers["x-content-type-options"] == "nosniff"
        assert raw.text in (
            PATCH,
            "$ python -m pytest tests/test_calc.py\nFAILED tests/test_calc.py::test_add\n",
        )
        other = await client.get(f"{url(run_id)}/evidence/{'0' * 64}")
        assert other.status_code == 404
        # Every page forbids framing and inline script.
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


async def test_runs_filter_and_paginate(world: World) -> None:
    more = [
        await world.runtime.start_workflow(
            "repair",
            f"repair:octo/widgets#{100 + n}",
            {"repo": "octo/widgets", "issue_number": 100 + n},
        )
        for n in range(30)
    ]
    await settle(world.runtime, [s.run_id for s in more])
    async with world.browser() as client:
        await world.sign_in(client, world.people.owner)
        first = (await client.get("/api/runs")).json()
        assert first["total"] == 33 and len(first["runs"]) == 25
        second = (await client.get("/api/runs?page=2")).json()
        assert len(second["runs"]) == 8
        assert not {r["run_id"] for r in first["runs"]} & {r["run_id"] for r in second["runs"]}
        secret = (await client.get("/api/runs?repo=octo/secret")).json()
        assert [r["run_id"] for r in secret["runs"]] == [world.runs["secret#1"]]
        waiting = (await client.get("/api/runs?phase=awaiting-review")).json()
        assert waiting["total"] == 33
        assert (await client.get("/api/runs?phase=merging")).json()["total"] == 0
        assert (await client.get("/api/runs?status=completed")).json()["total"] == 0
        page = await client.get("/runs?repo=octo/widgets&page=2")
        assert 'rel="prev" href="/runs?repo=octo%2Fwidgets&amp;page=1"' in page.text
        assert "page 2 of 2" in page.text
        await world.runtime.cancel("repair:octo/secret#1", "done")
        await world.runtime.wait_for(world.runs["secret#1"], statuses=("cancelled",))
        cancelled = (await client.get("/api/runs?outcome=cancelled")).json()
        assert [r["run_id"] for r in cancelled["runs"]] == [world.runs["secret#1"]]


async def test_the_run_streams_its_status_until_it_ends(world: World) -> None:
    run_id = world.runs["widgets#2"]
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        stream = asyncio.create_task(client.get(f"{url(run_id)}/live"))
        await asyncio.sleep(0.5)
        await world.runtime.cancel("repair:octo/widgets#2", "enough")
        answer = await asyncio.wait_for(stream, 30)
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(block.split("data: ", 1)[1])
        for block in answer.text.split("\n\n")
        if block.startswith("event: run")
    ]
    assert events[0]["status"] == "running"
    assert events[-1]["status"] == "cancelled" and events[-1]["closed"]


async def test_deliveries_page_and_rerun(world: World) -> None:
    payload = json.loads((WEBHOOK_EXAMPLES / "issues" / "labeled.json").read_text())
    payload["repository"]["full_name"] = "octo/widgets"
    payload["repository"]["id"] = world.emulator.store.repos["octo/widgets"].id
    with world.runtime.engine.begin() as conn:
        conn.execute(
            insert(deliveries).values(
                delivery_id="d-1",
                event="issues",
                action="labeled",
                status="failed",
                detail="RuntimeError: boom",
                body=json.dumps(payload).encode(),
                received_at=time.time(),
            )
        )
    async with world.browser() as client:
        await world.sign_in(client, world.people.stranger)
        assert "d-1" not in (await client.get("/deliveries")).text
    async with world.browser() as client:
        await world.sign_in(client, world.people.reader)
        page = await client.get("/deliveries")
        assert "d-1" in page.text and "Re-run handlers" not in page.text
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get("/deliveries")
        assert "Re-run handlers" in page.text
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        assert (await client.post("/deliveries/d-1/rerun", data={"csrf": "x"})).status_code == 403
        done = await client.post("/deliveries/d-1/rerun", data={"csrf": csrf})
        assert done.status_code == 303 and "notice=delivery+d-1" in done.headers["location"]
    with world.runtime.engine.connect() as conn:
        row = conn.execute(select(deliveries).where(deliveries.c.delivery_id == "d-1")).one()
    assert row.attempts == 2


async def test_a_tampered_session_cookie_is_no_session(world: World) -> None:
    async with world.browser() as client:
        await world.sign_in(client, world.people.owner)
        cookie = client.cookies[SESSION_COOKIE]
        client.cookies.set(
            SESSION_COOKIE, cookie[:-4] + ("AAAA" if cookie[-4:] != "AAAA" else "BBBB")
        )
        assert (await client.get("/runs")).status_code == 303
