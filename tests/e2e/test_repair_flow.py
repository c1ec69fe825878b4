"""The repair end to end over real webhooks: label -> reproduce -> fix -> verify
-> draft PR -> approval on the exact commit -> sha-pinned merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo.project import FIXED_LINE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from tests.e2e.scenario import (
    file_on_branch,
    final_check,
    github_state,
    open_labelled_issue,
    record_history,
    wait_end,
    wait_phase,
)


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


@pytest.mark.fast
async def test_happy_path_to_merge(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    people = stack.people
    await stack.gh.review(
        people.owner,
        stack.repo_name,
        status["pull_number"],
        as_user=people.maintainer,
        event="APPROVE",
        body="Looks right.",
    )
    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged"
    approval = run.result["approval"]
    assert approval["reviewer"] == people.maintainer
    assert approval["commit"] == run.result["proposed_sha"]

    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["merged_at"] is not None and pull["head"]["sha"] == run.result["proposed_sha"]
    assert len(state["status_comments"]) == 1
    # Merged: the branch is deleted (the repository config may keep it).
    assert state["branches"] == ["main"]
    check = await final_check(stack, run.result["proposed_sha"])
    assert check["conclusion"] == "success"
    body = state["status_comments"][0]["body"]
    assert "Merged the fix." in body
    # The fix is confirmed on the base branch: the merge commit's tree is the
    # verified one and the reproduction passes there (its own evidence item).
    merge_commit = run.result["merge_commit_sha"]
    assert f"Merged the approved commit as `{merge_commit[:12]}`" in body
    assert "the reproduction passes on it" in body
    assert "reproduction on the merge commit" in body
    assert "✅ Confirm the fix on the merge commit" in body
    assert "reproduction on the merge commit" in check["output"]["summary"]
    record_history(stack, number, "repair_v2_merged_and_confirmed")
    assert FIXED_LINE in file_on_branch(stack, "main", "slugify/__init__.py")
    assert [c["user"]["login"] for c in state["status_comments"]] == ["repairbot[bot]"]
