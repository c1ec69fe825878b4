"""The repair workflow's rules with fake activities (no emulator, git, sandbox
or agent): which phases it goes through, what it ends with, what it calls."""

from __future__ import annotations

import copy

from app.engine.testing import FakeActivities
from tests.workflows.repair_scenario import (
    MERGED,
    PROPOSED_SHA,
    REQUEST,
    WORKFLOW_ID,
    approve,
    merged_fakes,
    recorded_result,
    repair_env,
    run_approved,
    start_repair,
    status_body,
)


async def test_an_approved_fix_is_merged(kit_db_url: str) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        status = await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        assert status["proposed_sha"] == PROPOSED_SHA
        await approve(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result
    assert fakes.unexpected == []
    print(fakes.operations())


async def test_the_status_comment_is_rewritten_by_the_id_its_first_write_returned(
    kit_db_url: str,
) -> None:
    """The first write finds or makes the comment; every later one names it, so
    the activity edits it without listing the issue's comments."""
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    writes = fakes.calls_to("github.comment")
    assert len(writes) >= 3
    first_id = next(
        e["data"]["result"]["id"]
        for e in MERGED["events"]
        if e["type"] == "activity_completed" and e["data"]["activity"] == "github.comment"
    )
    assert writes[0].input.get("comment_id") is None
    assert [w.input.get("comment_id") for w in writes[1:]] == [first_id] * (len(writes) - 1)


async def test_the_status_comment_is_first_written_reproducing(kit_db_url: str) -> None:
    """A "preparing" written once the preparation was over was overwritten a
    step later: a run writes its comment one time less than a run recorded
    before this change (whose history still replays with the write)."""
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    writes = fakes.calls_to("github.comment")
    assert "- ⏳ Reproduce the bug on the base commit" in writes[0].input["body"]
    assert "- ✅ Read the repository and its config" in writes[0].input["body"]
    recorded = [
        e
        for e in MERGED["events"]
        if e["type"] == "activity_completed" and e["data"]["activity"] == "github.comment"
    ]
    assert len(writes) == len(recorded) - 1


async def test_the_check_run_is_completed_by_the_id_its_first_write_returned(
    kit_db_url: str,
) -> None:
    """The in-progress check run on the proposed commit is found or made by its
    marker; the final write names the id that write returned, so the activity
    updates it without listing the commit's check runs."""
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    writes = [c.input for c in fakes.calls_to("github.check_run")]
    assert [w["head_sha"] for w in writes] == [PROPOSED_SHA, PROPOSED_SHA]
    first_id = recorded_result("github.check_run")["id"]
    assert writes[0].get("check_run_id") is None
    assert writes[1].get("check_run_id") == first_id
    assert writes[1]["conclusion"] == "success"


async def test_the_fork_is_chosen_with_the_repository_id_the_run_is_keyed_by(
    kit_db_url: str,
) -> None:
    """The proposal fork's parent is the id from the run's request: the
    activity does not read the base repository to learn it."""
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    [chosen] = fakes.inputs("github.proposal_repo")
    assert REQUEST["repo_id"] is not None
    assert chosen["repo_id"] == REQUEST["repo_id"]


MERGE_SHA: str = recorded_result("github.merge")["merge_commit_sha"]
VERIFIED_TREE: str = recorded_result("github.commit_trees")["trees"][PROPOSED_SHA]


def built_with_tree(tree: str) -> FakeActivities:
    """The recorded merge, with ``github.build_commit`` answering the commit's tree."""
    return merged_fakes().on("github.build_commit", {"sha": PROPOSED_SHA, "tree": tree})


async def test_the_confirmation_reads_back_only_the_merge_commits_tree(kit_db_url: str) -> None:
    """The verified commit is one the run built, and its build said its tree:
    only the merge commit's tree is read from GitHub to compare with it."""
    fakes = built_with_tree(VERIFIED_TREE)
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result
    [read] = fakes.inputs("github.commit_trees")
    assert read["commits"] == [MERGE_SHA]


async def test_a_merge_commit_whose_tree_is_not_the_built_tree_goes_to_a_human(
    kit_db_url: str,
) -> None:
    """The built commit's tree is what the merge commit's is compared with."""
    fakes = built_with_tree("0" * 40)
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "needs-human", (run.status, run.error)
    assert "What landed is not what was verified" in status_body(fakes)


async def test_the_draft_is_marked_ready_by_the_node_the_revalidating_read_named(
    kit_db_url: str,
) -> None:
    """The read just before the merge saw the pull request a draft and named
    its node: the activity marks it ready without reading it again."""
    observed = copy.deepcopy(recorded_result("github.observe"))
    observed["pull"]["node_id"] = "PR_kwDOproposal"
    fakes = merged_fakes().on("github.observe", observed)
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    [ready] = fakes.inputs("github.ready_for_review")
    assert ready["node_id"] == "PR_kwDOproposal"


async def test_only_the_first_status_write_is_marked_first(kit_db_url: str) -> None:
    """No step before it wrote the status comment: the first write may create
    it without listing the issue's comments; every later one may not."""
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    marked = [w.input.get("first_write", False) for w in fakes.calls_to("github.comment")]
    assert marked[0] is True
    assert not any(marked[1:])


async def test_only_the_first_check_run_write_on_a_commit_is_marked_first(
    kit_db_url: str,
) -> None:
    fakes = merged_fakes()
    run = await run_approved(fakes, kit_db_url)
    assert run.status == "completed", run.error
    writes = [c.input for c in fakes.calls_to("github.check_run")]
    assert [w.get("first_write", False) for w in writes] == [True, False]
