"""Conditional requests as GitHub answers them: an ``ETag`` on every 200 GET,
``304 Not Modified`` without a body for a matching ``If-None-Match``, and a
304 not counted against the primary rate limit."""

from __future__ import annotations

import httpx
from emu_helpers import World

from emulator.client import EmulatorClient


def _http(world: World) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=world.client.api_url,
        transport=httpx.ASGITransport(app=world.emulator.asgi()),
        headers={"Authorization": f"token {world.client.tokens['alice']}"},
    )


async def _issue(client: EmulatorClient) -> int:
    issue = await client.create_issue(
        "octo", "demo", as_user="alice", title="Broken", body="It breaks."
    )
    return int(issue["number"])


async def test_a_matching_tag_is_answered_304_without_a_body_and_not_counted(
    world: World,
) -> None:
    number = await _issue(world.client)
    async with _http(world) as http:
        first = await http.get(f"/repos/octo/demo/issues/{number}")
        assert first.status_code == 200 and first.headers["etag"].startswith('W/"')
        used = int(first.headers["x-ratelimit-used"])
        again = await http.get(
            f"/repos/octo/demo/issues/{number}",
            headers={"If-None-Match": first.headers["etag"]},
        )
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == first.headers["etag"]
        assert int(again.headers["x-ratelimit-used"]) == used
        # A plain GET after it is counted again: only the 304 was free.
        plain = await http.get(f"/repos/octo/demo/issues/{number}")
        assert int(plain.headers["x-ratelimit-used"]) == used + 1


async def test_a_change_gives_a_new_tag_and_a_full_answer(world: World) -> None:
    number = await _issue(world.client)
    async with _http(world) as http:
        first = await http.get(f"/repos/octo/demo/issues/{number}")
        await world.client.comment("octo", "demo", number, "me too", as_user="rita")
        await http.patch(f"/repos/octo/demo/issues/{number}", json={"state": "closed"})
        after = await http.get(
            f"/repos/octo/demo/issues/{number}",
            headers={"If-None-Match": first.headers["etag"]},
        )
        assert after.status_code == 200 and after.json()["state"] == "closed"
        assert after.headers["etag"] != first.headers["etag"]


async def test_a_tag_is_per_principal_and_list_answers_have_tags_too(world: World) -> None:
    number = await _issue(world.client)
    async with _http(world) as alice:
        mine = await alice.get(f"/repos/octo/demo/issues/{number}/comments")
    assert mine.status_code == 200 and "etag" in mine.headers
    async with httpx.AsyncClient(
        base_url=world.client.api_url,
        transport=httpx.ASGITransport(app=world.emulator.asgi()),
        headers={"Authorization": f"token {world.client.tokens['rita']}"},
    ) as rita:
        theirs = await rita.get(
            f"/repos/octo/demo/issues/{number}/comments",
            headers={"If-None-Match": mine.headers["etag"]},
        )
    assert theirs.status_code == 200  # Vary: Authorization


async def test_mutations_and_errors_carry_no_tag(world: World) -> None:
    async with _http(world) as http:
        missing = await http.get("/repos/octo/demo/issues/999")
        created = await http.post("/repos/octo/demo/issues", json={"title": "t", "body": "b"})
    assert missing.status_code == 404 and "etag" not in missing.headers
    assert created.status_code == 201 and "etag" not in created.headers
