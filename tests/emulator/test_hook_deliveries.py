"""The App's hook deliveries as GitHub keeps them: failures recorded and never
retried on their own, listed newest first by cursor, redelivered on request."""

from __future__ import annotations

import re

from emu_helpers import WebhookSink, World
from githubkit.exception import RequestFailed
from githubkit_schemas.latest.models import HookDelivery, HookDeliveryItem


async def _issues(world: World, count: int) -> None:
    for n in range(count):
        await world.client.create_issue("octo", "demo", as_user="alice", title=f"bug {n}")
    await world.client.deliveries.wait()


async def test_a_receiver_that_is_down_gets_one_failed_attempt(
    world: World, sink: WebhookSink
) -> None:
    before = len(sink.received)
    sink.down = True
    await _issues(world, 1)
    sink.down, sink.status = False, 503
    await _issues(world, 1)
    app = world.app_github()
    items = (await app.rest.apps.async_list_webhook_deliveries()).parsed_data
    assert all(isinstance(i, HookDeliveryItem) for i in items)
    items = [i for i in items if i.event == "issues"]
    newest, oldest = items[0], items[-1]
    assert (newest.status_code, newest.status) == (503, "Invalid HTTP Response: 503")
    assert oldest.status_code == 0 and oldest.status.startswith("failed to connect")
    # GitHub does not retry: one attempt per delivery, each its own guid.
    assert len({i.guid for i in items}) == len(items)
    assert not any(i.redelivery for i in items)
    # The 503 reached the receiver; the refused one did not.
    assert len(sink.received) == before + 1


async def test_deliveries_are_paged_by_cursor_through_the_link_header(world: World) -> None:
    await _issues(world, 5)
    app = world.app_github()
    seen: list[HookDeliveryItem] = []
    response = await app.rest.apps.async_list_webhook_deliveries(per_page=2)
    pages = 1
    while True:
        seen += response.parsed_data
        link = response.headers.get("link", "")
        found = re.search(r'<[^>]*[?&]cursor=([^&>]+)[^>]*>; rel="next"', link)
        if not found:
            break
        assert "page=" not in link.replace("per_page=", "")
        response = await app.rest.apps.async_list_webhook_deliveries(
            per_page=2, cursor=found.group(1)
        )
        pages += 1
    all_at_once = (await app.rest.apps.async_list_webhook_deliveries(per_page=100)).parsed_data
    assert [i.id for i in seen] == [i.id for i in all_at_once]
    assert [i.id for i in seen] == sorted((i.id for i in seen), reverse=True)
    assert pages == -(-len(seen) // 2) and len(seen) >= 5


async def test_status_filter_and_bad_cursor(world: World, sink: WebhookSink) -> None:
    await _issues(world, 1)
    sink.status = 500
    await _issues(world, 1)
    app = world.app_github()
    failed = (await app.rest.apps.async_list_webhook_deliveries(status="failure")).parsed_data
    ok = (await app.rest.apps.async_list_webhook_deliveries(status="success")).parsed_data
    assert [i.status_code for i in failed] == [500]  # failed to connect (0) is neither
    assert ok and all(200 <= i.status_code < 400 for i in ok)
    try:
        await app.rest.apps.async_list_webhook_deliveries(cursor="nonsense")
    except RequestFailed as exc:
        assert exc.response.status_code == 400
    else:
        raise AssertionError("a bad cursor was accepted")


async def test_redelivery_resends_the_same_guid_marked_as_redelivery(
    world: World, sink: WebhookSink
) -> None:
    before = len(sink.received)
    sink.down = True
    await _issues(world, 1)
    sink.down = False
    app = world.app_github()
    listed = (await app.rest.apps.async_list_webhook_deliveries()).parsed_data
    [failed] = [i for i in listed if i.status_code == 0]
    answer = await app.rest.apps.async_redeliver_webhook_delivery(failed.id)
    assert answer.status_code == 202
    await world.client.deliveries.wait()
    newest = (await app.rest.apps.async_list_webhook_deliveries()).parsed_data[0]
    assert (newest.guid, newest.redelivery, newest.status_code) == (failed.guid, True, 202)
    assert newest.id > failed.id
    [received] = sink.received[before:]
    assert received.headers["X-GitHub-Delivery"] == failed.guid
    full = (await app.rest.apps.async_get_webhook_delivery(newest.id)).parsed_data
    assert isinstance(full, HookDelivery) and full.redelivery


async def test_delivery_endpoints_need_the_app_jwt(world: World) -> None:
    await _issues(world, 1)
    # (githubkit's installation auth switches to the JWT for /app paths by itself.)
    user = world.user_github("alice")
    try:
        await user.rest.apps.async_list_webhook_deliveries()
    except RequestFailed as exc:
        assert exc.response.status_code == 401
    else:
        raise AssertionError("a user token listed the App's deliveries")
