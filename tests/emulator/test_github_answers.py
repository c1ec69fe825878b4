"""GitHub's answers the app must survive, as the emulator gives them: API
versions, 405 "Base branch was modified", drafts a plan does not support, and
``mergeable: null`` while GitHub computes."""

from __future__ import annotations

from typing import Any

import pytest
from emu_helpers import World
from githubkit.exception import RequestFailed

FIX = {"calc.py": "def add(a, b):\n    return a + b\n"}
MERGE = "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"
BASE_MODIFIED = "Base branch was modified. Review and try the merge again."


async def _pr(world: World, gh: Any, *, draft: bool = False) -> Any:
    await world.client.push_as("alice", "octo", "demo", "fix", FIX)
    created = await gh.rest.pulls.async_create(
        "octo", "demo", title="Fix add", head="fix", base="main", draft=draft
    )
    return created.parsed_data


async def _get_raw(gh: Any, number: int, version: str | None) -> Any:
    headers = {"X-GitHub-Api-Version": version} if version else None
    return await gh.rest.pulls.async_get("octo", "demo", number, headers=headers)


async def test_the_version_githubkit_sends_is_selected(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    response = await _get_raw(gh, pr.number, None)
    sent = response.raw_request.headers["x-github-api-version"]
    assert sent == "2026-03-10"  # githubkit 0.16.1's version
    assert response.headers["x-github-api-version-selected"] == sent


async def test_2026_03_10_drops_the_fields_it_removed(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    new = (await _get_raw(gh, pr.number, "2026-03-10")).json()
    old = await _get_raw(gh, pr.number, "2022-11-28")
    assert old.headers["x-github-api-version-selected"] == "2022-11-28"
    assert isinstance(old.json()["merge_commit_sha"], str)
    assert "merge_commit_sha" not in new and "assignee" not in new
    assert "has_downloads" not in new["base"]["repo"]
    assert "has_downloads" in old.json()["base"]["repo"]
    issue = (await gh.rest.issues.async_get("octo", "demo", pr.number)).json()
    assert "assignee" not in issue and "assignees" in issue
    limits = (await gh.rest.rate_limit.async_get()).json()
    assert "rate" not in limits and "core" in limits["resources"]


async def test_an_unsupported_version_is_refused_with_400(world: World) -> None:
    gh = world.github()
    with pytest.raises(RequestFailed) as err:
        await gh.rest.repos.async_get(
            "octo", "demo", headers={"X-GitHub-Api-Version": "2021-01-01"}
        )
    assert err.value.response.status_code == 400
    assert "2021-01-01" in err.value.response.json()["message"]


async def test_a_base_modified_merge_is_405_and_scriptable(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    await world.client.faults.add(MERGE, "fail", status=405, message=BASE_MODIFIED)
    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert err.value.response.status_code == 405
    assert err.value.response.json()["message"] == BASE_MODIFIED
    # Not a refusal: the same merge goes through on the next try.
    merged = await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert merged.parsed_data.merged


async def test_drafts_can_be_unsupported_per_repository(world: World) -> None:
    gh = world.github()
    assert (await world.client.repo_settings("octo", "demo", drafts_supported=False)) == {
        "drafts_supported": False
    }
    with pytest.raises(RequestFailed) as err:
        await _pr(world, gh, draft=True)
    assert err.value.response.status_code == 422
    assert "Draft pull requests are not supported in this repository." in str(
        err.value.response.json()
    )
    ready = (
        await gh.rest.pulls.async_create(
            "octo", "demo", title="Fix add", head="fix", base="main", draft=False
        )
    ).parsed_data
    assert ready.draft is False


async def test_mergeable_is_null_for_the_first_reads(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    await world.client.mergeable_unknown("octo", "demo", pr.number, reads=2)
    seen = [(await _get_raw(gh, pr.number, None)).parsed_data.mergeable for _ in range(3)]
    assert seen == [None, None, True]
