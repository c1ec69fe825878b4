from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from gh_scene import Scene
from sqlalchemy import Engine

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.contracts.github import RevertInput, RevertResult, propose_revert
from app.engine._context import WorkflowContext
from app.engine._errors import TransientError
from app.engine._registry import Registry, workflow
from app.engine._runtime import Runtime
from app.evidence import DatabaseEvidenceStore
from app.github.markers import OpId
from app.github.merge import (
    HeadMoved,
    Merged,
    MergePatience,
    NotMergeable,
    merge_pinned,
    read_pull,
)
from app.github.pulls import ensure_pull_request
from tests.waiting import wait_until

MERGE = "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"
BRANCH = "repairbot/issue-1"
FIXED = {"calc.py": "def add(a, b):\n    return a + b\n"}
PushBranch = Callable[..., Awaitable[str]]


@pytest.fixture
async def proposal(scene: Scene, push_branch: PushBranch) -> tuple[int, str]:
    """A ready-for-review pull request from our branch: (number, proposed commit)."""
    sha = await push_branch(BRANCH, FIXED)
    pr = await ensure_pull_request(
        scene.gh,
        scene.repo,
        head=BRANCH,
        base="main",
        title="Fix",
        body="b",
        op=OpId("r", "pr"),
        bot_login=scene.bot_login,
    )
    await scene.client.mark_ready("octo", "demo", pr.number, as_user="alice")
    return pr.number, sha


def main_head(scene: Scene) -> str:
    from emulator.gitview import open_git

    sha = open_git(scene.state()).resolve("refs/heads/main")
    assert sha is not None
    return sha


def merged_in_emulator(scene: Scene, number: int) -> bool:
    return scene.state().issues[number].pull.merged  # type: ignore[union-attr]


async def test_merges_the_approved_commit(scene: Scene, proposal: tuple[int, str]) -> None:
    number, sha = proposal
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha)
    assert outcome == Merged(main_head(scene))
    assert merged_in_emulator(scene, number)


async def test_a_draft_is_not_merged(scene: Scene, push_branch: PushBranch) -> None:
    sha = await push_branch(BRANCH, FIXED)
    pr = await ensure_pull_request(
        scene.gh,
        scene.repo,
        head=BRANCH,
        base="main",
        title="Fix",
        body="b",
        op=OpId("r", "pr"),
        bot_login=scene.bot_login,
    )
    outcome = await merge_pinned(scene.gh, scene.repo, pr.number, sha)
    assert isinstance(outcome, NotMergeable) and "draft" in outcome.reason
    assert main_head(scene) == scene.head


async def test_head_moved_before_we_looked(
    scene: Scene, proposal: tuple[int, str], push_branch: PushBranch
) -> None:
    number, approved = proposal
    moved = await push_branch(BRANCH, {"calc.py": "def add(a, b):\n    return b + a\n"})
    assert await merge_pinned(scene.gh, scene.repo, number, approved) == HeadMoved(approved, moved)
    assert not merged_in_emulator(scene, number)


async def test_head_moved_between_read_and_merge_is_refused_by_github(
    scene: Scene, proposal: tuple[int, str], push_branch: PushBranch
) -> None:
    number, approved = proposal
    fault = await scene.client.faults.add(MERGE, "delay", delay=0.5)
    merging = asyncio.create_task(merge_pinned(scene.gh, scene.repo, number, approved))

    async def put_is_held() -> bool:
        faults = await scene.client.faults.list()
        return any(f["fired"] for f in faults if f["id"] == fault["id"])

    await wait_until("our PUT is in, held by the emulator", put_is_held)
    moved = await push_branch(BRANCH, {"calc.py": "def add(a, b):\n    return b + a\n"})
    assert await merging == HeadMoved(approved, moved)  # GitHub answered 409
    assert not merged_in_emulator(scene, number)


async def test_lost_answer_is_read_back_as_merged(scene: Scene, proposal: tuple[int, str]) -> None:
    number, sha = proposal
    await scene.client.faults.add(MERGE, "drop")
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha)
    assert outcome == Merged(main_head(scene), already=True)
    assert merged_in_emulator(scene, number)


async def test_racing_twins_merge_once(scene: Scene, proposal: tuple[int, str]) -> None:
    number, sha = proposal
    before = main_head(scene)
    outcomes = await asyncio.gather(
        *(merge_pinned(scene.gh, scene.repo, number, sha) for _ in range(2))
    )
    after = main_head(scene)
    assert all(isinstance(o, Merged) and o.merge_commit_sha == after for o in outcomes)
    from emulator.gitview import open_git

    assert open_git(scene.state()).commit_info(after).parents == (before,)  # one squash commit


async def test_conflict_is_not_mergeable(
    scene: Scene, proposal: tuple[int, str], push_branch: PushBranch
) -> None:
    number, sha = proposal
    await push_branch("main", {"calc.py": "def add(a, b):\n    return sum((a, b))\n"})
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha)
    assert isinstance(outcome, NotMergeable) and "not mergeable" in outcome.reason
    assert not merged_in_emulator(scene, number)


async def test_a_closed_pull_request_is_not_merged(scene: Scene, proposal: tuple[int, str]) -> None:
    number, sha = proposal
    await scene.client.rest(
        "PATCH", f"/repos/octo/demo/pulls/{number}", as_user="alice", body={"state": "closed"}
    )
    assert await merge_pinned(scene.gh, scene.repo, number, sha) == NotMergeable(
        "the pull request is closed"
    )


@pytest.mark.parametrize(
    "fault", [{"kind": "fail", "status": 502}, {"kind": "rate_limit", "status": 403}]
)
async def test_server_trouble_is_transient(
    scene: Scene, proposal: tuple[int, str], fault: dict[str, object]
) -> None:
    number, sha = proposal
    await scene.client.faults.add(MERGE, **fault)  # type: ignore[arg-type]
    with pytest.raises(TransientError):
        await merge_pinned(scene.gh, scene.repo, number, sha)
    assert not merged_in_emulator(scene, number)
    assert isinstance(await merge_pinned(scene.gh, scene.repo, number, sha), Merged)


# -- GitHub's answers that are not what they seem ------------------------------------------

BASE_MODIFIED = "Base branch was modified. Review and try the merge again."
QUICK = MergePatience(mergeable_pause=0.0, base_modified_pause=0.0)


async def test_base_modified_405_is_retried_and_merges(
    scene: Scene, proposal: tuple[int, str]
) -> None:
    number, sha = proposal
    await scene.client.faults.add(MERGE, "fail", status=405, message=BASE_MODIFIED, times=2)
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha, patience=QUICK)
    assert outcome == Merged(main_head(scene))
    assert merged_in_emulator(scene, number)
    assert [f["fired"] for f in await scene.client.faults.list()] == [2]


async def test_base_modified_past_the_tries_is_transient_not_a_refusal(
    scene: Scene, proposal: tuple[int, str]
) -> None:
    number, sha = proposal
    await scene.client.faults.add(MERGE, "fail", status=405, message=BASE_MODIFIED, times=3)
    with pytest.raises(TransientError):
        await merge_pinned(scene.gh, scene.repo, number, sha, patience=QUICK)
    assert not merged_in_emulator(scene, number)
    assert isinstance(await merge_pinned(scene.gh, scene.repo, number, sha), Merged)


async def test_a_405_that_means_not_mergeable_goes_to_a_human(
    scene: Scene, proposal: tuple[int, str]
) -> None:
    number, sha = proposal
    await scene.client.faults.add(
        MERGE, "fail", status=405, message="Pull Request is not mergeable"
    )
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha, patience=QUICK)
    assert outcome == NotMergeable("Pull Request is not mergeable")
    assert not merged_in_emulator(scene, number)


async def test_mergeable_null_is_waited_out(scene: Scene, proposal: tuple[int, str]) -> None:
    number, sha = proposal
    await scene.client.mergeable_unknown("octo", "demo", number, reads=3)
    assert (await read_pull(scene.gh, scene.repo, number)).mergeable is None
    outcome = await merge_pinned(scene.gh, scene.repo, number, sha, patience=QUICK)
    assert outcome == Merged(main_head(scene))
    assert scene.state().issues[number].pull.mergeable_unknown_reads == 0  # type: ignore[union-attr]


async def test_merge_commit_sha_is_read_under_the_version_githubkit_requests(
    scene: Scene, proposal: tuple[int, str]
) -> None:
    """2026-03-10 removed merge_commit_sha from pull requests: read_pull still knows it."""
    number, sha = proposal
    await merge_pinned(scene.gh, scene.repo, number, sha)
    raw = await scene.gh.rest.pulls.async_get("octo", "demo", number)
    assert raw.headers["x-github-api-version-selected"] == "2026-03-10"
    assert "merge_commit_sha" not in raw.json()
    state = await read_pull(scene.gh, scene.repo, number)
    assert state.merged and state.merge_commit_sha == main_head(scene)


# -- the revert proposal (the fix did not hold on the merge commit) -----------------


@workflow("propose-revert-twice")
async def _revert_twice(ctx: WorkflowContext, raw: dict[str, Any]) -> Any:
    """The activity run twice with the same input (a retry after a lost answer)."""
    first = await ctx.activity(propose_revert, raw, step="revert-1")
    again = await ctx.activity(propose_revert, raw, step="revert-2")
    return [first, again]


async def test_revert_proposal_is_a_draft_that_undoes_the_merge_once(
    scene: Scene, proposal: tuple[int, str], served: str, db_engine: Engine
) -> None:
    from emulator.gitview import open_git

    number, sha = proposal
    merged = await merge_pinned(scene.gh, scene.repo, number, sha)
    assert isinstance(merged, Merged)
    access = GitHubAccess(factory=scene.factory, git_url=served)
    registry = Registry.of([_revert_twice])
    registry.register_activities(
        GitHubActivities(access, DatabaseEvidenceStore(db_engine), Settings())
    )
    runtime = Runtime(db_engine, registry, reconcile_interval=0.05)
    await runtime.start_in_process()
    try:
        raw = RevertInput(
            repo="octo/demo",
            installation_id=scene.installation_id,
            op_run="r",
            op_step="revert",
            merge_sha=merged.merge_commit_sha,
            base="main",
            branch=f"{BRANCH}-revert",
            title="Revert the fix for #1",
            body="The reproduction still fails on the merge commit.",
            timestamp="2026-12-01T00:00:00+00:00",
        ).model_dump(mode="json")
        await runtime.start_workflow("propose-revert-twice", "revert-1", raw)
        run = await runtime.wait_for("revert-1", timeout=60)
    finally:
        await runtime.stop()
    assert run.status == "completed", run.error
    first, again = (RevertResult.model_validate(r) for r in run.result)
    assert first == again  # the same commit and pull request, not a second one
    git = open_git(scene.state())
    info = git.commit_info(first.sha)
    assert info.parents == (merged.merge_commit_sha,)
    assert info.tree == git.commit_info(scene.head).tree  # main as before the merge
    assert git.resolve(f"refs/heads/{BRANCH}-revert") == first.sha
    pulls = [i.pull for i in scene.state().issues.values() if i.pull is not None]
    [revert] = [p for p in pulls if p.head_ref == f"{BRANCH}-revert"]
    assert revert.draft and not revert.merged and revert.issue.number == first.number
