"""Each fault kind, observed from a githubkit client."""

from __future__ import annotations

import time

import httpx
import pytest
from emu_helpers import World
from githubkit.exception import (
    PrimaryRateLimitExceeded,
    RequestError,
    RequestFailed,
    SecondaryRateLimitExceeded,
)

GET_REPO = "GET /repos/{owner}/{repo}"
CREATE_ISSUE = "POST /repos/{owner}/{repo}/issues"


async def test_fail_n_times_then_succeed(world: World) -> None:
    gh = world.github()
    await world.client.faults.add(CREATE_ISSUE, "fail", status=502, times=2)
    for _ in range(2):
        with pytest.raises(RequestFailed) as err:
            await gh.rest.issues.async_create("octo", "demo", title="x")
        assert err.value.response.status_code == 502
    created = (await gh.rest.issues.async_create("octo", "demo", title="x")).parsed_data
    assert created.number == 1  # the failed attempts applied nothing


async def test_delay(world: World) -> None:
    gh = world.github()
    await gh.rest.repos.async_get("octo", "demo")  # token minted outside the timing
    await world.client.faults.add(GET_REPO, "delay", delay=0.3)
    started = time.monotonic()
    await gh.rest.repos.async_get("octo", "demo")
    assert time.monotonic() - started >= 0.3


async def test_secondary_rate_limit_with_retry_after(world: World) -> None:
    gh = world.github()
    await world.client.faults.add(GET_REPO, "rate_limit", status=429, retry_after=7)
    with pytest.raises(SecondaryRateLimitExceeded) as err:
        await gh.rest.repos.async_get("octo", "demo")
    assert err.value.retry_after.total_seconds() == 7
    assert err.value.response.status_code == 429


async def test_primary_rate_limit_with_x_ratelimit_headers(world: World) -> None:
    gh = world.github()
    await world.client.faults.add(
        GET_REPO, "rate_limit", status=403, rate_limit_style="x-ratelimit", retry_after=60
    )
    with pytest.raises(PrimaryRateLimitExceeded) as err:
        await gh.rest.repos.async_get("octo", "demo")
    assert err.value.response.headers["x-ratelimit-remaining"] == "0"
    assert 0 < err.value.retry_after.total_seconds() <= 60


async def test_drop_applies_the_mutation_then_cuts_the_answer(world: World) -> None:
    gh = world.github()
    await world.client.faults.add(CREATE_ISSUE, "drop")
    with pytest.raises(RequestError) as err:
        await gh.rest.issues.async_create("octo", "demo", title="lost answer")
    assert isinstance(err.value.exc, httpx.RemoteProtocolError)
    issues = (await gh.rest.issues.async_list_for_repo("octo", "demo")).parsed_data
    assert [i.title for i in issues] == ["lost answer"]


async def test_drop_on_merge_then_read_back(world: World) -> None:
    gh = world.github()
    await world.client.push_as("alice", "octo", "demo", "fix", {"a.txt": "a"})
    pr = (
        await gh.rest.pulls.async_create("octo", "demo", title="t", head="fix", base="main")
    ).parsed_data
    await world.client.faults.add("PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge", "drop")
    with pytest.raises(RequestError):
        await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data.merged


async def test_faults_listed_and_cleared(world: World) -> None:
    await world.client.faults.add(GET_REPO, "fail", times=5)
    assert [f["endpoint"] for f in await world.client.faults.list()] == [GET_REPO]
    await world.client.faults.clear()
    gh = world.github()
    assert (await gh.rest.repos.async_get("octo", "demo")).status_code == 200


async def test_a_client_that_disconnects_mid_body_changes_nothing(world: World) -> None:
    """A worker killed (or timed out) while sending its request: GitHub never
    saw a whole request, so nothing is applied and nothing is answered."""
    body = b'{"title": "never sent in full"}'
    sent: list[dict[str, object]] = []
    chunks = [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, object]:
        return chunks.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    token = world.client.tokens["alice"]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v3/repos/octo/demo/issues",
        "raw_path": b"/api/v3/repos/octo/demo/issues",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"emulator"),
            (b"authorization", f"token {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("emulator", 80),
    }
    await world.emulator.asgi()(scope, receive, send)  # type: ignore[arg-type]
    assert sent == []  # no answer to a request that never arrived whole
    gh = world.user_github("alice")
    issues = await gh.rest.issues.async_list_for_repo("octo", "demo")
    assert issues.parsed_data == []
