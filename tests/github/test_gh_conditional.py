"""Conditional re-reads and the shared rate budget, against the emulator
(which answers ``If-None-Match`` as GitHub does) and a real database shared
by two client factories (two worker processes' worth of clients)."""

from __future__ import annotations

import httpx
import pytest
from gh_scene import Scene
from sqlalchemy import Engine

from app.engine._errors import TransientError
from app.github.conditional import (
    ConditionalTransport,
    DatabaseConditionalStore,
    MemoryConditionalStore,
    revalidating,
)
from app.github.rate_budget import RateBudget, RateBudgetWait
from emulator.auth import Principal


def _used(scene: Scene) -> int:
    """Requests the emulator counted against the installation this hour."""
    installation = scene.emulator.store.installations[scene.installation_id]
    principal = Principal(kind="installation", installation=installation)
    return int(scene.emulator.rate.overview(principal)["rate"]["used"])


async def _new_issue(scene: Scene) -> int:
    issue = await scene.client.create_issue(
        "octo", "demo", as_user="alice", title="Broken", body="It breaks."
    )
    return int(issue["number"])


async def test_a_re_read_of_an_unchanged_issue_costs_nothing(
    scene: Scene, db_engine: Engine
) -> None:
    number = await _new_issue(scene)
    factory = scene.new_factory(conditional=DatabaseConditionalStore(db_engine))
    gh = factory.for_installation(scene.installation_id)
    with revalidating():
        first = (await gh.rest.issues.async_get("octo", "demo", number)).parsed_data
        used = _used(scene)
        again = (await gh.rest.issues.async_get("octo", "demo", number)).parsed_data
    assert again.title == first.title == "Broken"
    assert _used(scene) == used  # answered 304: not counted


async def test_another_worker_shares_the_stored_answer_and_sees_changes(
    scene: Scene, db_engine: Engine
) -> None:
    number = await _new_issue(scene)
    one = scene.new_factory(conditional=DatabaseConditionalStore(db_engine))
    two = scene.new_factory(conditional=DatabaseConditionalStore(db_engine))
    gh_one = one.for_installation(scene.installation_id)
    with revalidating():
        await gh_one.rest.issues.async_get("octo", "demo", number)
    used = _used(scene)
    gh_two = two.for_installation(scene.installation_id)
    with revalidating():
        await gh_two.rest.issues.async_get("octo", "demo", number)
    assert _used(scene) == used  # its first read was revalidated, not fetched
    await scene.client.rest(
        "PATCH", f"/repos/octo/demo/issues/{number}", as_user="alice", body={"state": "closed"}
    )
    with revalidating():
        changed = (await gh_two.rest.issues.async_get("octo", "demo", number)).parsed_data
    assert changed.state == "closed"  # a change is never hidden
    assert _used(scene) == used + 1


async def test_without_a_store_every_read_is_counted(scene: Scene) -> None:
    """The guard's own test: the saving comes from the conditional transport."""
    number = await _new_issue(scene)
    gh = scene.new_factory().for_installation(scene.installation_id)
    await gh.rest.issues.async_get("octo", "demo", number)
    used = _used(scene)
    await gh.rest.issues.async_get("octo", "demo", number)
    assert _used(scene) == used + 1


async def test_mutations_are_never_conditional() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"etag": 'W/"a"'}, json={"ok": True})

    store = MemoryConditionalStore()
    transport = ConditionalTransport(httpx.MockTransport(answer), 1, store)
    async with httpx.AsyncClient(transport=transport, base_url="https://api.test") as client:
        await client.patch("/repos/o/r/issues/1", json={"state": "closed"})
        await client.patch("/repos/o/r/issues/1", json={"state": "closed"})
    assert all("if-none-match" not in r.headers for r in seen)


async def test_a_large_or_failed_answer_is_not_stored() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/big"):
            return httpx.Response(200, headers={"etag": 'W/"b"'}, content=b"x" * (2 << 20))
        return httpx.Response(404, headers={"etag": 'W/"n"'}, json={"message": "Not Found"})

    store = MemoryConditionalStore()
    transport = ConditionalTransport(httpx.MockTransport(answer), 1, store)
    async with httpx.AsyncClient(transport=transport, base_url="https://api.test") as client:
        with revalidating():
            assert len((await client.get("/big")).content) == 2 << 20
            assert (await client.get("/missing")).status_code == 404
    assert store._entries == {}


async def test_reads_outside_a_drift_check_are_neither_stored_nor_revalidated() -> None:
    """A run's one-off reads cost no store look-up or write; the drift check's do."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"etag": 'W/"a"'}, json={"ok": True})

    store = MemoryConditionalStore()
    transport = ConditionalTransport(httpx.MockTransport(answer), 1, store)
    async with httpx.AsyncClient(transport=transport, base_url="https://api.test") as client:
        await client.get("/repos/o/r/contents/setup.py")
        await client.get("/repos/o/r/contents/setup.py")
        assert store._entries == {}
        assert all("if-none-match" not in r.headers for r in seen)
        with revalidating():
            await client.get("/repos/o/r/issues/1")
            await client.get("/repos/o/r/issues/1")
    assert len(store._entries) == 1
    assert seen[-1].headers["if-none-match"] == 'W/"a"'


def _answer(remaining: int, reset: float, status: int = 200, **extra: str) -> httpx.Response:
    headers = {
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": str(remaining),
        "x-ratelimit-reset": str(reset),
        "x-ratelimit-resource": "core",
        **extra,
    }
    return httpx.Response(status, headers=headers, json={})


async def test_reads_wait_at_the_reserve_and_mutations_go_on(db_engine: Engine) -> None:
    now = 1_000_000.0
    budget = RateBudget(db_engine, clock=lambda: now)
    await budget.after(7, _answer(remaining=499, reset=now + 600))
    with pytest.raises(RateBudgetWait) as waited:
        await budget.before(7, mutation=False)
    assert isinstance(waited.value, TransientError)
    assert 600 <= (waited.value.next_retry_delay or 0) <= 602
    await budget.before(7, mutation=True)  # the reserve is for mutations
    await budget.before(8, mutation=False)  # another installation has its own budget
    # Another worker reads the same record (the shared part of the budget).
    other = RateBudget(db_engine, clock=lambda: now)
    with pytest.raises(RateBudgetWait):
        await other.before(7, mutation=False)
    # After the reset, the window's spending is forgotten.
    later = RateBudget(db_engine, clock=lambda: now + 700)
    await later.before(7, mutation=False)


async def test_nothing_left_stops_mutations_too(db_engine: Engine) -> None:
    now = 1_000_000.0
    budget = RateBudget(db_engine, clock=lambda: now)
    await budget.after(7, _answer(remaining=0, reset=now + 60))
    with pytest.raises(RateBudgetWait):
        await budget.before(7, mutation=True)


async def test_a_secondary_limit_pauses_every_worker(db_engine: Engine) -> None:
    now = 1_000_000.0
    budget = RateBudget(db_engine, clock=lambda: now)
    await budget.after(
        7, _answer(remaining=4000, reset=now + 3000, status=403, **{"retry-after": "90"})
    )
    other = RateBudget(db_engine, clock=lambda: now + 10)
    with pytest.raises(RateBudgetWait) as waited:
        await other.before(7, mutation=True)
    assert 79 <= (waited.value.next_retry_delay or 0) <= 81
    await RateBudget(db_engine, clock=lambda: now + 91).before(7, mutation=True)
