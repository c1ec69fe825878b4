"""The run's last word after a merge: the reproduction runs once more on the
merge commit, and when it still fails there the run says so on the issue,
fails its check run and opens a draft pull request reverting the merge.

The merged tree is the verified tree (the confirmation checks that first), so
what fails on the merge commit is a reproduction that reads more than the
tree: here, like a version stamp taken from git, the commit it runs on. On
the base commit the bug is there; while verifying, the fix is applied on the
base commit and the reproduction passes; on GitHub's squash commit (subject
"<title> (#<n>)") it fails again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.demo.project import fix_agent_command, write_project
from app.demo.stack import LocalStack
from tests.e2e.scenario import (
    branch_sha,
    final_check,
    first_parent_history,
    github_state,
    open_labelled_issue,
    review,
    wait_end,
    wait_phase,
)

#: Fails while the bug is there, and on any commit GitHub squashed from a PR.
REPRODUCE = (
    f"{sys.executable} -m unittest tests.test_punctuation"
    " && ! git log -1 --format=%s | grep -Eq '[(]#[0-9]+[)]$'"
)


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    project = write_project(tmp_path / "project")
    config = project / ".github" / "repairbot.yml"
    lines = config.read_text().splitlines(keepends=True)
    config.write_text(
        "".join(
            f"reproduce: [/bin/sh, -c, {json.dumps(REPRODUCE)}]\n"
            if line.startswith("reproduce:")
            else line
            for line in lines
        )
    )
    return project


async def test_a_fix_that_fails_on_the_merge_commit_is_reported_and_a_revert_proposed(
    stack: LocalStack,
) -> None:
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)

    assert run.status == "completed", run.error
    assert run.result["outcome"] == "fix-not-confirmed", run.result
    merged, proposed = run.result["merge_commit_sha"], run.result["proposed_sha"]
    owner, repo = people.owner, stack.repo_name

    # GitHub: the fix did land (the revert is a proposal, not an act) ...
    assert branch_sha(stack, "main") == merged
    assert first_parent_history(stack, "main")[0].endswith(f"(#{status['pull_number']})")
    state = await github_state(stack, number)
    fix, revert = sorted(state["pulls"], key=lambda pull: pull["number"])
    assert fix["merged_at"] is not None and fix["head"]["sha"] == proposed
    # ... the check run on the proposed commit fails ...
    check = await final_check(stack, proposed)
    assert check["conclusion"] == "failure"
    assert "reproduction still fails on the merge commit" in check["output"]["summary"]
    # ... and a draft pull request reverts the merge commit to its parent's tree.
    assert revert["draft"] is True and revert["state"] == "open"
    assert revert["merged_at"] is None and revert["base"]["ref"] == "main"
    assert revert["head"]["ref"] == f"{fix['head']['ref']}-revert"
    assert revert["head"]["repo"]["full_name"] == f"{owner}/{repo}"
    assert revert["title"] == f"Revert the fix for #{number}"
    assert f"repairbot merged `{merged[:12]}`" in revert["body"]
    revert_commit = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/git/commits/{revert['head']['sha']}", as_user=owner
    )
    merge_commit = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/git/commits/{merged}", as_user=owner
    )
    parent = await stack.gh.rest(
        "GET",
        f"/repos/{owner}/{repo}/git/commits/{merge_commit['parents'][0]['sha']}",
        as_user=owner,
    )
    assert [p["sha"] for p in revert_commit["parents"]] == [merged]
    assert revert_commit["tree"]["sha"] == parent["tree"]["sha"]

    # The issue: one status comment that says what happened and links the revert.
    [comment] = state["status_comments"]
    body = comment["body"]
    assert "Merged, but the reproduction still fails on the merge commit." in body
    assert f"The reproduction still fails on the merge commit `{merged[:12]}`" in body
    assert f"Revert proposal: #{revert['number']} (draft) {revert['html_url']}" in body
    assert "reproduction on the merge commit" in body  # its own evidence item
