"""Closing keywords: a merge into the default branch closes the issues the
pull request's body and commit messages name, as GitHub does (closer = the
merger, ``state_reason: completed``, an ``issues.closed`` delivery)."""

from __future__ import annotations

from typing import Any

import pytest
from emu_helpers import WebhookSink, World

from emulator.closing import KEYWORDS, referenced_numbers
from emulator.state import Repo


def _repo(world: World) -> Repo:
    repo = world.emulator.store.repo("octo", "demo")
    assert repo is not None
    return repo


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_every_keyword_in_any_case_with_or_without_colon(world: World, keyword: str) -> None:
    repo = _repo(world)
    for text in (f"{keyword} #4", f"{keyword.upper()}: #4", f"{keyword.title()} octo/demo#4"):
        assert referenced_numbers(text, repo) == [4], text


def test_what_does_not_close(world: World) -> None:
    repo = _repo(world)
    assert referenced_numbers("see #4; prefix#5; unfixes #6; fixes other/repo#7", repo) == []
    assert referenced_numbers("Fixes #3, closes #3 and resolves #9", repo) == [3, 9]


async def _issue(world: World, title: str) -> int:
    made = await world.client.create_issue("octo", "demo", as_user="octo", title=title)
    return int(made["number"])


async def _merge(
    world: World,
    gh: Any,
    *,
    body: str,
    branch: str = "fix",
    base: str = "main",
    message: str | None = None,
) -> None:
    await world.client.push_as("alice", "octo", "demo", branch, {"f.txt": branch}, message=message)
    pr = (
        await gh.rest.pulls.async_create(
            "octo", "demo", title="t", head=branch, base=base, body=body
        )
    ).parsed_data
    await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)


async def test_merge_closes_issues_named_in_body_and_commits(
    world: World, sink: WebhookSink
) -> None:
    gh = world.github()
    first, second, third = [await _issue(world, t) for t in "abc"]
    await _merge(world, gh, body=f"FIXES #{first}", message=f"Resolves: #{second}\n\nsee #{third}")
    await world.client.deliveries.wait()
    closed = {e["issue"]["number"]: e for e in sink.events("issues", "closed")}
    assert set(closed) == {first, second}
    event = closed[first]
    # The merger (the app's bot here) closed it, as GitHub reports it.
    assert event["sender"]["type"] == "Bot"
    assert event["issue"]["state"] == "closed"
    assert event["issue"]["state_reason"] == "completed"
    assert event["issue"]["closed_by"]["login"] == event["sender"]["login"]
    issue = (await gh.rest.issues.async_get("octo", "demo", third)).parsed_data
    assert issue.state == "open"


async def test_a_merge_into_another_branch_closes_nothing(world: World, sink: WebhookSink) -> None:
    gh = world.github()
    number = await _issue(world, "x")
    await world.client.push_as("alice", "octo", "demo", "release", {"r.txt": "r"})
    await _merge(world, gh, body=f"fixes #{number}", base="release")
    await world.client.deliveries.wait()
    assert sink.events("issues", "closed") == []


async def test_a_person_merging_is_the_closer(world: World, sink: WebhookSink) -> None:
    number = await _issue(world, "x")
    await _merge(world, world.user_github("alice"), body=f"Closes #{number}")
    await world.client.deliveries.wait()
    [event] = sink.events("issues", "closed")
    assert event["sender"]["login"] == "alice"
    assert event["issue"]["closed_by"]["login"] == "alice"
