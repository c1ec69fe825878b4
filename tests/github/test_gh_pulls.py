from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest
from gh_scene import Recording, Scene

from app.engine._errors import PermanentError, TransientError
from app.github.markers import Marker, OpId, parse_marker
from app.github.merge import read_pull
from app.github.pulls import PullSnapshot, ensure_pull_request, mark_ready_for_review

OP = OpId("run-1", "pull-request")
CREATE = "POST /repos/{owner}/{repo}/pulls"
FIXED = {"calc.py": "def add(a, b):\n    return a + b\n"}
PushBranch = Callable[..., Awaitable[str]]


def pulls_in(scene: Scene) -> list[tuple[int, str, str, bool, str]]:
    """(number, head branch, state, draft, body) of every PR the emulator holds."""
    return sorted(
        (pr.issue.number, pr.head_ref, pr.issue.state, pr.draft, pr.issue.body or "")
        for pr in scene.state().pulls()
    )


async def ensure(
    scene: Scene, *, body: str = "Evidence: ...", title: str = "Fix add"
) -> PullSnapshot:
    return await ensure_pull_request(
        scene.gh,
        scene.repo,
        head="repairbot/issue-1",
        base="main",
        title=title,
        body=body,
        op=OP,
        fields={"sha": "abc"},
        bot_login=scene.bot_login,
    )


@pytest.fixture
async def branch(push_branch: PushBranch) -> str:
    return await push_branch("repairbot/issue-1", FIXED)


async def test_created_as_a_draft_with_marker_then_found(scene: Scene, branch: str) -> None:
    first = await ensure(scene)
    again = await ensure(scene)
    assert first.created and not again.created
    [(number, head, state, draft, body)] = pulls_in(scene)
    assert (number, head, state, draft) == (first.number, "repairbot/issue-1", "open", True)
    assert parse_marker(body) == Marker(OP, {"sha": "abc"})
    assert first.head_sha == branch


async def test_new_evidence_updates_the_body_in_place(scene: Scene, branch: str) -> None:
    await ensure(scene, body="attempt 1")
    await ensure(scene, body="attempt 2", title="Fix add (2)")
    [(_, _, _, _, body)] = pulls_in(scene)
    assert body.startswith("attempt 2")
    assert scene.state().pulls()[0].issue.title == "Fix add (2)"


async def test_lost_answer_is_read_back(scene: Scene, branch: str) -> None:
    await scene.client.faults.add(CREATE, "drop")
    result = await ensure(scene)
    assert result.created
    assert len(pulls_in(scene)) == 1


async def test_racing_twins_open_one_pull_request(scene: Scene, branch: str) -> None:
    results = await asyncio.gather(ensure(scene), ensure(scene))
    [(number, *_)] = pulls_in(scene)
    assert {r.number for r in results} == {number}


async def test_server_error_then_retry(scene: Scene, branch: str) -> None:
    await scene.client.faults.add(CREATE, "fail", status=500)
    with pytest.raises(TransientError):
        await ensure(scene)
    assert pulls_in(scene) == []
    await ensure(scene)
    assert len(pulls_in(scene)) == 1


async def test_rate_limited_create(scene: Scene, branch: str) -> None:
    await scene.client.faults.add(CREATE, "rate_limit", status=429, retry_after=30)
    with pytest.raises(TransientError) as caught:
        await ensure(scene)
    assert caught.value.next_retry_delay == pytest.approx(30, abs=2)


async def test_someone_elses_open_pull_request_is_not_adopted(scene: Scene, branch: str) -> None:
    await scene.client.rest(
        "POST",
        "/repos/octo/demo/pulls",
        as_user="alice",
        body={"head": "repairbot/issue-1", "base": "main", "title": "mine"},
    )
    with pytest.raises(PermanentError, match="without our marker"):
        await ensure(scene)
    assert len(pulls_in(scene)) == 1


async def test_a_closed_pull_request_is_returned_not_replaced(scene: Scene, branch: str) -> None:
    first = await ensure(scene)
    await scene.client.rest(
        "PATCH", f"/repos/octo/demo/pulls/{first.number}", as_user="alice", body={"state": "closed"}
    )
    again = await ensure(scene)
    assert (again.number, again.state, again.created) == (first.number, "closed", False)
    assert len(pulls_in(scene)) == 1


async def test_no_commits_is_permanent(scene: Scene) -> None:
    await scene.gh.rest.git.async_create_ref(
        "octo", "demo", ref="refs/heads/repairbot/issue-1", sha=scene.head
    )
    with pytest.raises(PermanentError, match="No commits between"):
        await ensure(scene)


async def test_a_plan_without_drafts_gets_a_ready_pull_request(scene: Scene, branch: str) -> None:
    await scene.client.repo_settings("octo", "demo", drafts_supported=False)
    first = await ensure(scene)
    again = await ensure(scene)
    assert first.created and not first.draft and not again.created
    [(number, head, state, draft, _)] = pulls_in(scene)
    assert (number, head, state, draft) == (first.number, "repairbot/issue-1", "open", False)


# -- out of draft ------------------------------------------------------------------------


async def test_a_draft_is_marked_ready_by_the_node_a_read_named_in_one_request(
    scene: Scene, branch: str
) -> None:
    """The caller's read just saw it a draft and named its node: the
    mutation alone, no read of the pull request before it."""
    opened = await ensure(scene)
    seen = await read_pull(scene.gh, scene.repo, opened.number)
    assert seen.draft and seen.node_id
    recording = Recording(httpx.ASGITransport(app=scene.emulator.asgi()))
    gh = scene.new_factory(transport=recording).for_installation(scene.installation_id)
    await gh.rest.repos.async_get("octo", "demo")  # the token minted before counting
    recording.seen.clear()
    assert await mark_ready_for_review(gh, scene.repo, opened.number, node_id=seen.node_id)
    assert recording.seen == ["POST /api/graphql"]
    assert [draft for _, _, _, draft, _ in pulls_in(scene)] == [False]


async def test_marking_ready_again_changes_nothing(scene: Scene, branch: str) -> None:
    """A retry after the mutation landed (its answer lost, or the worker
    crashed before the result was recorded) leaves it ready."""
    opened = await ensure(scene)
    seen = await read_pull(scene.gh, scene.repo, opened.number)
    for _ in range(2):
        await mark_ready_for_review(scene.gh, scene.repo, opened.number, node_id=seen.node_id)
    assert [draft for _, _, _, draft, _ in pulls_in(scene)] == [False]


async def test_a_mutation_github_refuses_reads_the_pull_request_and_goes_on(
    scene: Scene, branch: str
) -> None:
    """GitHub's GraphQL error for the node (real GitHub may refuse a pull
    request that is no longer a draft): the pull request is read, and
    marked ready if it still is a draft."""
    opened = await ensure(scene)
    changed = await mark_ready_for_review(
        scene.gh, scene.repo, opened.number, node_id="PR_not-a-node"
    )
    assert changed
    assert [draft for _, _, _, draft, _ in pulls_in(scene)] == [False]
    # Ready already: the read says so, and nothing is sent.
    assert not await mark_ready_for_review(
        scene.gh, scene.repo, opened.number, node_id="PR_not-a-node"
    )
