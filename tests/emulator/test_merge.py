"""Pull request merges happen in git, pinned by ``sha``; PR heads follow pushes."""

from __future__ import annotations

from typing import Any

import pytest
from emu_helpers import WebhookSink, World
from githubkit.exception import RequestFailed

FIX = {"calc.py": "def add(a, b):\n    return a + b\n"}


async def _pr(
    world: World, gh: Any, files: dict[str, str | None] = FIX, branch: str = "fix"
) -> Any:
    await world.client.push_as("alice", "octo", "demo", branch, files)
    created = await gh.rest.pulls.async_create(
        "octo", "demo", title="Fix add", head=branch, base="main"
    )
    return created.parsed_data


@pytest.mark.parametrize("method,parents", [("merge", 2), ("squash", 1), ("rebase", 1)])
async def test_merge_methods_make_real_commits(world: World, method: str, parents: int) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    result = (
        await gh.rest.pulls.async_merge(
            "octo", "demo", pr.number, sha=pr.head.sha, merge_method=method
        )
    ).parsed_data
    main = (await gh.rest.git.async_get_ref("octo", "demo", "heads/main")).parsed_data
    assert main.object_.sha == result.sha
    commit = (await gh.rest.git.async_get_commit("octo", "demo", result.sha)).parsed_data
    assert len(commit.parents) == parents and commit.parents[0].sha == world.head
    from emulator.gitview import open_git

    repo = world.emulator.store.repo("octo", "demo")
    assert repo is not None
    assert open_git(repo).read_file(result.sha, "calc.py") == FIX["calc.py"].encode()


async def test_stale_sha_is_409_and_pr_head_follows_push(world: World, sink: WebhookSink) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    moved = await world.client.push_as("alice", "octo", "demo", "fix", {"more.txt": "x"})
    again = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert again.head.sha == moved["sha"]
    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert err.value.response.status_code == 409
    assert (
        err.value.response.json()["message"]
        == "Head branch was modified. Review and try the merge again."
    )
    await world.client.deliveries.wait()
    (sync,) = sink.events("pull_request", "synchronize")
    assert (sync["before"], sync["after"]) == (pr.head.sha, moved["sha"])


async def test_conflicting_pr_is_405(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh, {"calc.py": "mine\n"})
    await world.client.push_as("octo", "octo", "demo", "main", {"calc.py": "theirs\n"})
    got = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert got.mergeable is False and got.mergeable_state == "dirty"
    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert err.value.response.status_code == 405
    assert err.value.response.json()["message"] == "Pull Request is not mergeable"


async def test_draft_cannot_merge_until_ready(world: World) -> None:
    gh = world.github()
    await world.client.push_as("alice", "octo", "demo", "fix", FIX)
    pr = (
        await gh.rest.pulls.async_create(
            "octo", "demo", title="t", head="fix", base="main", draft=True
        )
    ).parsed_data
    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge("octo", "demo", pr.number)
    assert err.value.response.status_code == 405
    await world.client.mark_ready("octo", "demo", pr.number, as_user="alice")
    assert (await gh.rest.pulls.async_merge("octo", "demo", pr.number)).parsed_data.merged


async def test_review_defaults_to_current_head_and_own_approval_refused(world: World) -> None:
    gh = world.github()
    pr = await _pr(world, gh)
    review = await world.client.review("octo", "demo", pr.number, as_user="octo", event="APPROVE")
    assert review["commit_id"] == pr.head.sha
    with pytest.raises(RequestFailed) as err:  # the bot opened the PR: no self-approval
        await gh.rest.pulls.async_create_review("octo", "demo", pr.number, event="APPROVE")
    assert err.value.response.status_code == 422
    bot = await gh.rest.pulls.async_create_review(
        "octo", "demo", pr.number, event="COMMENT", body="evidence"
    )
    assert bot.parsed_data.state == "COMMENTED"


# -- the merge base matters (what lands after a force-pushed base) ---------------------


async def _leaky_world(world: World, gh: Any) -> tuple[Any, str]:
    """``main`` gains LEAKED.txt, a PR is built on it, then ``main`` is force-pushed
    to a commit without it (the maintainer removed the leak). The PR and the
    rewritten base's sha."""
    await world.client.push_as("octo", "octo", "demo", "main", {"LEAKED.txt": "secret\n"})
    pr = await _pr(world, gh)
    rewritten = await world.client.push_as(
        "octo", "octo", "demo", "main", {"OTHER.txt": "x\n"}, force=True, parent=world.head
    )
    return pr, rewritten["sha"]


@pytest.mark.parametrize("method", ["merge", "squash", "rebase"])
async def test_merge_after_a_base_rewrite_brings_back_what_the_head_carries(
    world: World, method: str
) -> None:
    """As on GitHub: the merge is computed from the real merge base of head and
    base, so the commit removed from ``main`` comes back with the PR (a squash
    applies diff(merge-base..head) onto the base tip)."""
    from emulator.gitview import open_git

    gh = world.github()
    pr, rewritten = await _leaky_world(world, gh)
    result = (
        await gh.rest.pulls.async_merge(
            "octo", "demo", pr.number, sha=pr.head.sha, merge_method=method
        )
    ).parsed_data
    repo = world.emulator.store.repo("octo", "demo")
    assert repo is not None
    git = open_git(repo)
    assert git.read_file(result.sha, "LEAKED.txt") == b"secret\n"
    assert git.read_file(result.sha, "OTHER.txt") == b"x\n"
    assert git.is_ancestor(rewritten, result.sha)


async def test_compare_tells_a_rewritten_base_from_a_fast_forward(world: World) -> None:
    gh = world.github()
    start = world.head
    ahead = await world.client.push_as("octo", "octo", "demo", "main", {"A.txt": "a\n"})
    compared = (
        await gh.rest.repos.async_compare_commits("octo", "demo", f"{start}...{ahead['sha']}")
    ).parsed_data
    assert (compared.status, compared.ahead_by, compared.behind_by) == ("ahead", 1, 0)
    assert compared.merge_base_commit.sha == start
    rewritten = await world.client.push_as(
        "octo", "octo", "demo", "main", {"B.txt": "b\n"}, force=True, parent=start
    )
    compared = (
        await gh.rest.repos.async_compare_commits(
            "octo", "demo", f"{ahead['sha']}...{rewritten['sha']}"
        )
    ).parsed_data
    assert (compared.status, compared.ahead_by, compared.behind_by) == ("diverged", 1, 1)
    assert compared.merge_base_commit.sha == start
    assert [c.sha for c in compared.commits] == [rewritten["sha"]]
    with pytest.raises(RequestFailed) as err:
        await gh.rest.repos.async_compare_commits("octo", "demo", f"{start}...nope")
    assert err.value.response.status_code == 404


CONVERT = (
    "mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) "
    "{ pullRequest { isDraft } } }"
)


async def test_a_ready_pull_request_turned_back_into_a_draft_cannot_merge(
    world: World, sink: WebhookSink
) -> None:
    """``convertPullRequestToDraft`` (GraphQL, as on GitHub) as a human: the pull
    request is a draft again, ``converted_to_draft`` is announced, merging is 405."""
    gh = world.github()
    pr = await _pr(world, gh)
    assert not pr.draft
    answer = await world.user_github("alice").async_graphql(CONVERT, {"id": pr.node_id})
    assert answer["convertPullRequestToDraft"]["pullRequest"]["isDraft"] is True
    again = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert again.draft is True
    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge("octo", "demo", pr.number, sha=pr.head.sha)
    assert err.value.response.status_code == 405
    await world.client.deliveries.wait()
    (event,) = sink.events("pull_request", "converted_to_draft")
    assert event["pull_request"]["draft"] is True and event["sender"]["login"] == "alice"


async def test_a_merge_refused_for_a_conflict_leaves_the_pull_request_unmergeable(
    world: World,
) -> None:
    """A rebase replays the head's commits one by one, so it can conflict where
    the three-way merge behind ``mergeable`` does not: here the head changes a
    line the base also changed and then changes it back. After the refused
    merge the pull request reads ``mergeable: false`` for that pair of
    commits, as GitHub reports what its merge attempt found."""
    from emulator.gitview import open_git

    gh = world.github()
    repo = world.emulator.store.repo("octo", "demo")
    assert repo is not None
    original = open_git(repo).read_file(world.head, "calc.py")
    assert original is not None
    pr = await _pr(world, gh, {"calc.py": "mine\n"})
    back = await world.client.push_as(
        "alice", "octo", "demo", "fix", {"calc.py": original.decode()}
    )
    await world.client.push_as("octo", "octo", "demo", "main", {"calc.py": "theirs\n"})
    before = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert before.mergeable is True

    with pytest.raises(RequestFailed) as err:
        await gh.rest.pulls.async_merge(
            "octo", "demo", pr.number, sha=back["sha"], merge_method="rebase"
        )
    assert err.value.response.status_code == 405
    after = (await gh.rest.pulls.async_get("octo", "demo", pr.number)).parsed_data
    assert after.mergeable is False and after.mergeable_state == "dirty"
