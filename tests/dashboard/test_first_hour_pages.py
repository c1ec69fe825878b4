"""Dashboard rules from a maintainer's first hour (issue 22, point 8): notices
are never reflected from a link, a merged run offers no Retry, and a run
whose agent reported no tokens shows no token row."""

from __future__ import annotations

from urllib.parse import quote

from sqlalchemy import update

from app.engine._store.schema import runs, tasks
from app.operations.runs_view import run_detail
from app.web import actions
from tests.dashboard.conftest import World


async def test_a_notice_in_a_link_is_not_shown(world: World) -> None:
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        lure = "Your session expired: sign in again at evil.example"
        page = await client.get("/runs", params={"notice": lure})
        assert lure not in page.text
        forged = await client.get("/runs", params={"notice": lure, "sig": "0" * 64})
        assert lure not in forged.text


async def test_the_notice_of_an_action_is_shown_to_who_acted(world: World) -> None:
    run_id = world.runs["widgets#1"]
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get(f"/runs/{quote(run_id, safe='')}")
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        done = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "cancel", "reason": "not needed", "csrf": csrf},
        )
        assert done.status_code == 303
        shown = await client.get(done.headers["location"])
        assert "cancel: cancellation requested" in shown.text
    async with world.browser() as other:  # the same link, someone else: nothing
        await world.sign_in(other, world.people.reader)
        assert "cancellation requested" not in (await other.get(done.headers["location"])).text


async def test_a_merged_run_offers_no_retry(world: World) -> None:
    run_id = world.runs["widgets#2"]
    await world.runtime.cancel(run_id, "stand-in for the end of a run", by="@octo")
    await world.runtime.wait_for(run_id, statuses=("cancelled",))
    with world.runtime.engine.begin() as conn:
        conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id)
            .values(status="completed", result={"outcome": "merged"})
        )
    run = world.runtime.store.load_run(run_id)
    assert run is not None and actions.available(run) == []
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get(f"/runs/{quote(run_id, safe='')}")
        assert 'value="retry"' not in page.text
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        refused = await client.post(
            f"/runs/{quote(run_id, safe='')}/actions",
            data={"action": "retry", "reason": "again", "csrf": csrf},
        )
        assert refused.status_code == 409


async def test_no_agent_token_row_when_the_agent_reported_none(world: World) -> None:
    silent, counted = world.runs["widgets#2"], world.runs["widgets#1"]
    with world.runtime.engine.begin() as conn:  # an agent that reports no tokens
        conn.execute(
            update(tasks)
            .where(tasks.c.run_id == silent, tasks.c.activity == "agent.propose_fix")
            .values(result={"outcome": "proposed"})
        )
    for run_id, has_tokens in ((silent, False), (counted, True)):
        run = world.runtime.store.load_run(run_id)
        assert run is not None
        assert bool(sum(run_detail(world.runtime, run).tokens)) == has_tokens
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        assert "Agent tokens" not in (await client.get(f"/runs/{quote(silent, safe='')}")).text
        assert "Agent tokens" in (await client.get(f"/runs/{quote(counted, safe='')}")).text


async def test_deliveries_filter_by_event_and_hide_repairbots_own(world: World) -> None:
    import json
    import time

    from sqlalchemy import insert

    from app.web.deliveries_view import deliveries

    bot = f"{world.settings.github_app_slug}[bot]"
    with world.runtime.engine.begin() as conn:
        for delivery_id, event, sender in (
            ("d-human", "issues", "maya"),
            ("d-echo", "issue_comment", bot),
            ("d-comment", "issue_comment", "octo"),
        ):
            payload = {"repository": {"full_name": "octo/widgets"}, "sender": {"login": sender}}
            conn.execute(
                insert(deliveries).values(
                    delivery_id=delivery_id,
                    event=event,
                    action="created",
                    status="handled",
                    detail="",
                    body=json.dumps(payload).encode(),
                    received_at=time.time(),
                )
            )
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        everything = (await client.get("/deliveries")).text
        assert all(d in everything for d in ("d-human", "d-echo", "d-comment"))
        comments = (await client.get("/deliveries", params={"event": "issue_comment"})).text
        assert "d-echo" in comments and "d-comment" in comments and "d-human" not in comments
        quiet = (await client.get("/deliveries", params={"hide_own": "1"})).text
        assert "d-echo" not in quiet and "d-human" in quiet and "d-comment" in quiet
        assert f"Hide repairbot's own ({bot})" in quiet
