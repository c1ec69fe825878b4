"""The repair workflow's other paths, end to end over real webhooks.

Each scenario drives the emulated GitHub as people would (labels, reviews,
pushes, held or duplicated webhook deliveries) and checks the outcome where a
maintainer would see it: GitHub's issue comments, pull requests, branches and
commits, read from the emulator. repairbot's own records are read only for
what GitHub cannot show (how many agent attempts a run made, what an activity
answered).

To keep the file near a minute and a half, most scenarios run on SQLite only
(``SQLITE_ONLY``): their logic does not depend on the database. The happy path
(test_repair_flow.py), the cancellation and the duplicated deliveries, which
lean on the database's constraints and state changes, run on PostgreSQL too.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from app.contracts.ids import repair_branch
from app.demo.project import (
    BUGGY_LINE,
    FIXED_LINE,
    ISSUE_BODY,
    fix_agent_command,
    write_project,
)
from app.demo.stack import LocalStack
from tests.e2e.scenario import (
    activity_results,
    branch_sha,
    file_on_branch,
    final_check,
    first_parent_history,
    github_state,
    heartbeat_every,
    open_labelled_issue,
    push_files,
    record_history,
    review,
    scheduled,
    status_comment,
    wait_end,
    wait_for,
    wait_phase,
    wait_status_comment,
)

#: For scenarios whose logic does not depend on the database (see above).
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

LIBRARY = "slugify/__init__.py"
MERGE_ENDPOINT = "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"
#: A fix that looks plausible and is wrong: the stray hyphens stay.
WRONG_LINE = 'return "-".join(words).lower()'
#: What the agent changes as well when a review asks for it.
REVIEW_ASK = (
    LIBRARY,
    '"""Turn titles into URL slugs."""',
    '"""Turn titles into URL slugs; empty words are dropped."""',
)


@pytest.fixture
def seed(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The demo repository; ``parametrize("seed", [policy], indirect=True)``
    sets its config's ``on_base_moved``."""
    return write_project(tmp_path / "project", on_base_moved=getattr(request, "param", None))


def _step(operation_id: str) -> str:
    """``verify-1`` of ``repair:octo/slugify#1/1:verify-1``."""
    return operation_id.rsplit(":", 1)[1]


async def _approve_and_wait_merged(stack: LocalStack, number: int, pull: int) -> None:
    await review(stack, pull, "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result


# -- 1. nothing to fix ------------------------------------------------------------------


@SQLITE_ONLY
async def test_not_reproduced_ends_without_a_pull_request(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    # The issue's own repro block wins over the config's: it runs the tests
    # that pass on the base commit, so there is no bug to see.
    repro = shlex.join([sys.executable, "-m", "unittest", "tests.test_slugify"])
    number = await open_labelled_issue(stack, body=f"{ISSUE_BODY}\n\n```repro\n{repro}\n```\n")

    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "not-reproduced"
    assert scheduled(stack, number, "agent.propose_fix") == []

    state = await github_state(stack, number)
    assert state["pulls"] == []
    assert state["branches"] == ["main"]
    [comment] = state["status_comments"]
    assert "Could not reproduce the bug" in comment["body"]
    assert "No pull request was opened" in comment["body"]
    assert "reproduction on the base commit" in comment["body"]  # the evidence is listed


@SQLITE_ONLY
async def test_retry_reads_the_issue_as_it_is_now(stack: LocalStack) -> None:
    """The first run used the issue's repro block (it passes: not reproduced).
    The maintainer edits the block out and an operator retries: the new run
    reads the issue again and runs the configured reproduction instead of
    replaying the old body."""
    from app.operations import run_actions

    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    repro = shlex.join([sys.executable, "-m", "unittest", "tests.test_slugify"])
    number = await open_labelled_issue(stack, body=f"{ISSUE_BODY}\n\n```repro\n{repro}\n```\n")
    first = await wait_end(stack, number)
    assert first.result["outcome"] == "not-reproduced"
    assert first.result["reproduction_source"] == "issue"

    await stack.gh.rest(
        "PATCH",
        f"/repos/{stack.people.owner}/{stack.repo_name}/issues/{number}",
        as_user=stack.people.owner,
        body={"body": ISSUE_BODY},
    )
    assert stack.runtime is not None
    retried = await run_actions.retry_run(stack.runtime, first.run_id, reason="edited", by="ops")
    assert retried != first.run_id
    status = await wait_phase(stack, number, "awaiting-review")
    assert status["run_id"] == retried
    assert status["reproduction_source"] == "config" and status["reproduced"] is True


# -- 1b. every end of the run's start is reported (issue 20, bug 2) ---------------------

PERMISSION_ENDPOINT = "GET /repos/{owner}/{repo}/collaborators/{username}/permission"


async def _ended_and_reported(stack: LocalStack, number: int, outcome: str) -> str:
    """The run ended with ``outcome`` and said so: its final status comment and
    a completed check run on the base commit. The comment's body."""
    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == outcome, run.result
    body = await status_comment(stack, number)
    assert "working on it" not in body
    head = branch_sha(stack, "main")
    assert head is not None
    check = await final_check(stack, head)
    assert check["conclusion"] == "neutral"
    assert (await github_state(stack, number))["pulls"] == []
    return body


@SQLITE_ONLY
async def test_invalid_config_is_reported(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    await push_files(stack, "main", {".github/repairbot.yml": "test: [unclosed\n"})
    number = await open_labelled_issue(stack)
    body = await _ended_and_reported(stack, number, "invalid-config")
    assert "the repository's repairbot config is invalid" in body
    assert "`.github/repairbot.yml`" in body
    assert scheduled(stack, number, "commands.run_reproduction") == []


@SQLITE_ONLY
async def test_no_reproduction_is_reported(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    config = f"test: [{sys.executable}, -m, unittest]\n"
    await push_files(stack, "main", {".github/repairbot.yml": config})
    number = await open_labelled_issue(stack)
    body = await _ended_and_reported(stack, number, "no-reproduction")
    assert "there is no reproduction command" in body
    assert scheduled(stack, number, "agent.propose_fix") == []


@SQLITE_ONLY
async def test_permanent_error_in_the_trigger_check_is_reported(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    await stack.gh.faults.add(PERMISSION_ENDPOINT, "fail", status=422, times=1)
    number = await open_labelled_issue(stack)
    body = await _ended_and_reported(stack, number, "error")
    assert "github.permission" in body and "Stopped by an error" in body


# -- 2. no candidate verifies: tests/workflows/test_repair_scenarios.py (the kit) ------


# -- 3. verify -> feedback -> retry; then a human closes the pull request ------------------


@SQLITE_ONLY
async def test_failed_verification_feeds_a_second_attempt(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command(wrong_first=True)))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")

    assert len(scheduled(stack, number, "agent.propose_fix")) == 2
    assert len(scheduled(stack, number, "commands.verify_candidate")) == 2
    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["number"] == status["pull_number"] and pull["draft"] is True
    assert "| repair attempts | 2 |" in pull["body"]
    assert pull["head"]["sha"] == branch_sha(stack, repair_branch(number))
    assert FIXED_LINE in file_on_branch(stack, repair_branch(number), LIBRARY)
    assert "Repair attempts: 2 of 3" in await status_comment(stack, number)

    # A maintainer closes the pull request instead of reviewing it: the run ends.
    await stack.gh.rest(
        "PATCH",
        f"/repos/{stack.repo}/pulls/{pull['number']}",
        as_user=stack.people.maintainer,
        body={"state": "closed"},
    )
    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "closed-by-human"
    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["state"] == "closed" and pull["merged_at"] is None
    body = await status_comment(stack, number)
    assert "closed by a human" in body and f"@{stack.people.maintainer}" in body
    assert BUGGY_LINE in file_on_branch(stack, "main", LIBRARY)


# -- 4 (and 6). changes requested -> new attempt on the same branch -> approval ----------


@SQLITE_ONLY
async def test_changes_requested_then_approved_on_the_new_head(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command(on_review=REVIEW_ASK)))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull, branch = status["pull_number"], repair_branch(number)
    first = branch_sha(stack, branch)
    assert first is not None and first == status["proposed_sha"]
    assert REVIEW_ASK[2] not in file_on_branch(stack, branch, LIBRARY)

    await review(
        stack, pull, "REQUEST_CHANGES", body="Please say in the docstring that empty words go."
    )
    maintainer = stack.people.maintainer
    await wait_status_comment(
        stack, number, f"Updated the proposal after @{maintainer}'s review", timeout=90
    )
    second = branch_sha(stack, branch)
    assert second is not None and second != first
    # The same branch moved from the first proposal to a new one: one pull
    # request, now at the new commit, which has both the fix and the change
    # the review asked for.
    state = await github_state(stack, number)
    [pr] = state["pulls"]
    assert pr["number"] == pull and pr["state"] == "open"
    assert pr["head"]["sha"] == second
    assert state["branches"] == ["main", branch]
    library = file_on_branch(stack, branch, LIBRARY)
    assert FIXED_LINE in library and REVIEW_ASK[2] in library
    assert len(scheduled(stack, number, "agent.propose_fix")) == 2
    assert len(scheduled(stack, number, "github.push_branch")) == 2
    assert f"Proposed commit: `{second}`" in await status_comment(stack, number)

    # 6: an approval of the superseded commit does not count.
    await review(stack, pull, "APPROVE", commit_id=first, body="LGTM (the old one)")
    await wait_status_comment(stack, number, "it does not count")
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None

    await _approve_and_wait_merged(stack, number, pull)
    state = await github_state(stack, number)
    [pr] = state["pulls"]
    assert pr["merged_at"] is not None and pr["head"]["sha"] == second
    library = file_on_branch(stack, "main", LIBRARY)
    assert FIXED_LINE in library and REVIEW_ASK[2] in library
    assert len(state["status_comments"]) == 1
    assert "Merged the fix." in state["status_comments"][0]["body"]
    record_history(stack, number, "repair_v2_second_attempt_merged")


@SQLITE_ONLY
async def test_review_round_does_not_overwrite_a_human_push(stack: LocalStack) -> None:
    """The update after a review is conditional on the branch still being at the
    first proposal: a maintainer's push in between is never overwritten."""
    # The agent thinks for a while, so the maintainer's push lands first.
    agent = fix_agent_command(on_review=REVIEW_ASK, sleep=1)
    stack.start_repairbot(agent_command=tuple(agent))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    branch = repair_branch(number)

    await review(stack, status["pull_number"], "REQUEST_CHANGES", body="Docstring, please.")
    await wait_phase(stack, number, "repairing")
    pushed = await push_files(stack, branch, {"NOTES.md": "My own take.\n"})

    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "human-pushed"
    assert [r["status"] for r in activity_results(stack, number, "github.push_branch")] == [
        "pushed",
        "lease-refused",
    ]
    assert branch_sha(stack, branch) == pushed
    [pr] = (await github_state(stack, number))["pulls"]
    assert pr["head"]["sha"] == pushed and pr["merged_at"] is None
    body = await status_comment(stack, number)
    assert "a human pushed to the proposal's branch" in body and "will not overwrite it" in body
    assert f"Pull request: #{pr['number']} (open)" in body


# -- 5. an approval from someone without write access: tests/workflows (the kit) --------

# -- 5b. the merge lands only what was verified -------------------------------------------


@SQLITE_ONLY
async def test_merge_landing_more_than_was_verified_goes_to_a_human(stack: LocalStack) -> None:
    """The base moves while GitHub holds the merge request (after repairbot's
    last look at it): the merge commit's tree is then not the verified tree.
    repairbot reads it back, says so and parks the run for a human; it does
    not report a plain success."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await stack.gh.faults.add(MERGE_ENDPOINT, "delay", delay=3, times=1)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")

    async def merge_request_arrived() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    await wait_for("repairbot's merge request reached GitHub", merge_request_arrived)
    await push_files(stack, "main", {"SURPRISE.md": "landed with the fix\n"})

    run = await wait_end(stack, number)
    assert run.status == "needs-human", (run.status, run.error)
    body = await wait_status_comment(stack, number, "What landed is not what was verified")
    assert "What landed is not what was verified" in body
    assert "Stopped: a human needs to decide" in body
    assert file_on_branch(stack, "main", "SURPRISE.md") == "landed with the fix\n"
    assert scheduled(stack, number, "commands.run_reproduction")[-1].endswith(":reproduce")


# -- 6c. the approval is bound to values read again at the merge ---------------------

COMMENT_UPDATE = "PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}"


async def _break_the_binding(stack: LocalStack, number: int, what: str) -> None:
    """Change one thing the approval is bound to, outside the run's own state."""
    if what == "permission":
        people = stack.people
        await stack.gh.set_permission(people.owner, stack.repo_name, people.maintainer, "read")
    elif what == "policy":
        config = file_on_branch(stack, "main", ".github/repairbot.yml")
        await push_files(stack, "main", {".github/repairbot.yml": config + "merge_method: merge\n"})
    else:
        from sqlalchemy import update

        from app.evidence.database import blobs

        assert stack.runtime is not None
        status = await wait_phase(stack, number, "merging")
        [patch] = [e["ref"]["sha256"] for e in status["evidence"] if e["label"].startswith("patch")]
        with stack.runtime.store.engine.begin() as conn:
            conn.execute(
                update(blobs)
                .where(blobs.c.sha256 == patch)
                .values(encoding="identity", data=b"import os  # not what was reviewed\n")
            )


@SQLITE_ONLY
@pytest.mark.parametrize(
    "what,said",
    [
        ("evidence", "The evidence changed since the approval"),
        ("policy", "The policy changed since the approval"),
        ("permission", "no longer has write access"),
    ],
)
async def test_a_broken_binding_stops_the_merge(stack: LocalStack, what: str, said: str) -> None:
    """Between the approval and the merge, the evidence bundle is altered in the
    store, the base's config (the policy) changes, or the approver loses write
    access: the merge check reads each again, and asks for a fresh approval."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await wait_status_comment(stack, number, "Waiting for a review")
    # The run's first write after the approval (the status comment saying
    # "merging") is held: the binding breaks while it is held.
    await stack.gh.faults.add(COMMENT_UPDATE, "delay", delay=3, times=1)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")

    async def merging_reported() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    await wait_for("the run reported the merge phase", merging_reported)
    await _break_the_binding(stack, number, what)

    await wait_status_comment(stack, number, said)
    await wait_phase(stack, number, "awaiting-review")
    assert scheduled(stack, number, "github.merge") == []
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None


# -- 6d. recovery tests 8 and 13: each guard at the merge on its own -----------------


@SQLITE_ONLY
async def test_a_dismissal_only_github_shows_stops_the_merge(stack: LocalStack) -> None:
    """Recovery test 8, the merge's own read: the approval is dismissed while
    the merge is under way and the dismissal's webhook does not arrive; the
    merge's re-read of the reviews on GitHub finds it and asks for a new review."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull = status["pull_number"]
    await wait_status_comment(stack, number, "Waiting for a review")
    await stack.gh.faults.add(COMMENT_UPDATE, "delay", delay=3, times=1)
    approval = await review(stack, pull, "APPROVE", body="Looks right.")

    async def merging_reported() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    await wait_for("the run reported the merge phase", merging_reported)
    await stack.gh.deliveries.hold()  # the dismissal's webhook stays with GitHub
    await stack.gh.dismiss_review(
        people.owner, stack.repo_name, pull, approval["id"], as_user=people.owner
    )
    await wait_status_comment(stack, number, "was dismissed: please review again")
    assert scheduled(stack, number, "github.merge") == []
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None
    await stack.gh.deliveries.release()


#: Reviews the merge's re-read of GitHub sees: its first page (per_page=100).
REVIEWS_READ = 100


@SQLITE_ONLY
async def test_a_dismissal_only_its_webhook_shows_stops_the_merge(stack: LocalStack) -> None:
    """Recovery test 8, the dismissal signal: the approval comes after a
    page's worth of comment reviews, so the merge's re-read of the reviews
    does not reach it; the dismissal's webhook, delivered with the approval's,
    is what asks for a new review."""
    people = stack.people
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull = status["pull_number"]
    for n in range(REVIEWS_READ):
        await review(stack, pull, "COMMENT", as_user=people.owner, body=f"Note {n}.")
    await stack.gh.deliveries.wait(timeout=60)
    await stack.gh.deliveries.hold()
    approval = await review(stack, pull, "APPROVE", body="Looks right.")
    await stack.gh.dismiss_review(
        people.owner, stack.repo_name, pull, approval["id"], as_user=people.owner
    )
    first_page = await stack.gh.rest(
        "GET",
        f"/repos/{people.owner}/{stack.repo_name}/pulls/{pull}/reviews?per_page={REVIEWS_READ}",
        as_user=people.owner,
    )
    assert approval["id"] not in {r["id"] for r in first_page}
    assert await stack.gh.deliveries.release() >= 2
    await wait_status_comment(stack, number, "was dismissed: please review again", timeout=60)
    await wait_phase(stack, number, "awaiting-review")
    assert scheduled(stack, number, "github.merge") == []
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None


@SQLITE_ONLY
async def test_an_approval_that_expires_while_the_run_waits_is_not_merged(
    stack: LocalStack,
) -> None:
    """Recovery test 13, the waiting case: the approval is valid when it
    arrives (it has seconds left), GitHub refuses the merge and the run parks;
    when an operator resumes it the approval has expired: no merge, a fresh
    approval is asked for."""
    import time
    from datetime import datetime

    runtime = stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    config = file_on_branch(stack, "main", ".github/repairbot.yml")
    await push_files(stack, "main", {".github/repairbot.yml": config + "approval_ttl_hours: 1\n"})
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await stack.gh.faults.add(
        MERGE_ENDPOINT, "fail", status=405, message="Pull Request is not mergeable", times=1
    )
    left = 15  # seconds of validity the approval has when it is submitted
    await stack.gh.advance_clock(-(3600 - left))
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    await stack.gh.advance_clock(3600 - left)
    parked = await wait_end(stack, number)
    assert parked.status == "needs-human", (parked.status, parked.error)
    [refused] = activity_results(stack, number, "github.merge")
    assert refused["outcome"] == "not-mergeable"  # the approval was accepted

    expiry = await runtime.aquery(parked.run_id, "status")
    expires = datetime.fromisoformat(expiry["approval"]["expires_at"]).timestamp()
    await wait_for("the approval expired", lambda: time.time() > expires, timeout=left + 30)
    assert await runtime.resume(parked.run_id, "merge now", by="ops")
    await wait_status_comment(stack, number, "The approval expired before the merge")
    await wait_phase(stack, number, "awaiting-review")
    assert len(scheduled(stack, number, "github.merge")) == 1  # only the refused one
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None


# -- 7. the head moved after the approval ---------------------------------------------------


@SQLITE_ONLY
async def test_head_moved_after_approval_is_not_merged(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull, branch = status["pull_number"], repair_branch(number)
    proposed = status["proposed_sha"]

    # repairbot hears of the approval only after the maintainer has pushed to
    # the branch: when it re-reads the pull request, the head is not the
    # approved commit any more.
    await stack.gh.deliveries.hold()
    await review(stack, pull, "APPROVE")
    pushed = await push_files(stack, branch, {"NOTES.md": "A human was here.\n"})
    assert await stack.gh.deliveries.release() >= 2

    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "human-pushed"
    state = await github_state(stack, number)
    [pr] = state["pulls"]
    assert pr["merged_at"] is None and pr["state"] == "open"
    assert pr["head"]["sha"] == pushed != proposed
    assert branch_sha(stack, branch) == pushed  # repairbot did not overwrite it
    assert BUGGY_LINE in file_on_branch(stack, "main", LIBRARY)
    body = await status_comment(stack, number)
    assert "a human pushed to the proposal's branch" in body
    # Which the run notices first is a race: the push's webhook, the approval
    # (which makes it re-read the pull request), or its own read of the branch
    # when it resumes. Each way the comment names the commit it did not push.
    short = pushed[:12]
    assert (
        f"@{stack.people.maintainer} pushed `{short}` to the branch" in body
        or f"The pull request's head moved to `{short}` after the approval, and "
        "repairbot did not push it."
        in body
        or f"Branch `{branch}` is at `{short}`, a commit repairbot did not push." in body
    ), body
    assert "/repair retry" in body
    assert scheduled(stack, number, "github.merge") == []


@SQLITE_ONLY
async def test_head_moved_during_the_merge_is_refused_by_the_pinned_sha(
    stack: LocalStack,
) -> None:
    """The head moves after repairbot re-read the pull request and before GitHub
    serves the merge: only the ``sha`` pin stops it. GitHub answers 409, the
    merge is not made, and the human's push parks the run for a human."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull, branch = status["pull_number"], repair_branch(number)
    # The merge request is held in the emulator for a while before it is served.
    await stack.gh.faults.add(MERGE_ENDPOINT, "delay", delay=1.5, times=1)

    await review(stack, pull, "APPROVE")

    async def merge_request_arrived() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    await wait_for("repairbot's merge request reached GitHub", merge_request_arrived)
    pushed = await push_files(stack, branch, {"NOTES.md": "A human was here.\n"})

    run = await wait_end(stack, number)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "human-pushed"
    [merged] = activity_results(stack, number, "github.merge")
    assert merged["outcome"] == "head-moved" and merged["head_sha"] == pushed
    state = await github_state(stack, number)
    [pr] = state["pulls"]
    assert pr["merged_at"] is None and pr["head"]["sha"] == pushed
    assert BUGGY_LINE in file_on_branch(stack, "main", LIBRARY)
    body = await status_comment(stack, number)
    assert "a human pushed to the proposal's branch" in body
    assert f"head moved to `{pushed[:12]}`" in body


# -- 8. the base branch moved after the proposal ---------------------------------------------


@SQLITE_ONLY
async def test_base_moved_reverify_then_merge(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    base = status["base_sha"]
    moved = await push_files(stack, "main", {"CHANGELOG.md": "- unrelated change\n"})
    assert moved != base

    await _approve_and_wait_merged(stack, number, status["pull_number"])
    # The default policy (reverify) re-ran the verification on the new base
    # before merging; no second review was needed.
    steps = [_step(op) for op in scheduled(stack, number, "commands.verify_candidate")]
    assert steps[0] == "verify-1" and steps[-1].startswith("reverify-")
    assert len(scheduled(stack, number, "github.merge")) == 1
    state = await github_state(stack, number)
    assert state["pulls"][0]["merged_at"] is not None
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)
    assert file_on_branch(stack, "main", "CHANGELOG.md") == "- unrelated change\n"


def _tree_of(stack: LocalStack, sha: str) -> tuple[str, tuple[str, ...]]:
    """A commit's tree and parents, read from the emulator's git."""
    from emulator.git import BareRepo

    assert stack.emulator is not None
    repo = stack.emulator.store.repo(stack.people.owner, stack.repo_name)
    assert repo is not None
    info = BareRepo(repo.path).commit_info(sha)
    return info.tree, tuple(info.parents)


def _has_file(stack: LocalStack, branch: str, path: str) -> bool:
    from emulator.git import BareRepo

    assert stack.emulator is not None
    repo = stack.emulator.store.repo(stack.people.owner, stack.repo_name)
    assert repo is not None
    git = BareRepo(repo.path)
    sha = git.resolve(branch)
    assert sha is not None
    return git.read_file(sha, path) is not None


@SQLITE_ONLY
async def test_base_fast_forward_rebuilds_the_proposal_on_the_new_tip(stack: LocalStack) -> None:
    """After a fast-forward of the base the same patch is rebuilt on the new tip,
    verified there and merged without a second review; what lands is the tree
    that was verified."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    proposed = status["proposed_sha"]
    moved = await push_files(stack, "main", {"CHANGELOG.md": "- unrelated change\n"})

    await _approve_and_wait_merged(stack, number, status["pull_number"])
    run = await wait_end(stack, number)
    rebuilt = run.result["proposed_sha"]
    assert rebuilt != proposed and run.result["pushed"] == [proposed, rebuilt]
    assert _tree_of(stack, rebuilt)[1] == (moved,)  # built on the new tip
    assert run.result["approval"]["carried_from"] == proposed
    [merged] = activity_results(stack, number, "github.merge")
    assert _tree_of(stack, merged["merge_commit_sha"])[0] == _tree_of(stack, rebuilt)[0]
    assert file_on_branch(stack, "main", "CHANGELOG.md") == "- unrelated change\n"
    # A merged run offers no retry: not on the dashboard, not through the CLI's path.
    from app.operations import run_actions
    from app.web import actions

    assert actions.available(run) == []
    assert stack.runtime is not None
    with pytest.raises(run_actions.RunMerged):
        await run_actions.retry_run(stack.runtime, run.run_id, reason="again", by="ops")


@SQLITE_ONLY
async def test_a_fix_that_no_longer_applies_on_the_moved_base_goes_to_a_human(
    stack: LocalStack,
) -> None:
    """The base moved and changed the very line the fix changes: the proposal
    cannot be rebuilt there. Nothing is merged; the run says why."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    library = file_on_branch(stack, "main", LIBRARY)
    moved = library.replace(BUGGY_LINE, BUGGY_LINE + "  # touched upstream")
    assert moved != library
    await push_files(stack, "main", {LIBRARY: moved})

    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.status == "needs-human", (run.status, run.error)
    body = await wait_status_comment(stack, number, "the fix no longer applies to it")
    assert "Stopped: a human needs to decide" in body
    assert scheduled(stack, number, "github.merge") == []
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None


@SQLITE_ONLY
async def test_rewritten_base_never_brings_removed_commits_back(stack: LocalStack) -> None:
    """Bug 1 of issue 20: ``main`` has a commit adding LEAKED.txt, the run
    proposes on it, the maintainer force-pushes ``main`` without that commit and
    approves. The proposal is rebuilt on the rewritten base, verified again, and
    needs a fresh approval of the new head; LEAKED.txt stays off ``main``."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    clean = branch_sha(stack, "main")
    assert clean is not None
    await push_files(stack, "main", {"LEAKED.txt": "a secret\n"})
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull, proposed = status["pull_number"], status["proposed_sha"]
    await stack.gh.push_as(
        stack.people.maintainer,
        stack.people.owner,
        stack.repo_name,
        "main",
        {"OTHER.md": "rewritten\n"},
        message="Rewrite main without the leak",
        force=True,
        parent=clean,
    )
    rewritten = branch_sha(stack, "main")
    assert not _has_file(stack, "main", "LEAKED.txt")

    await review(stack, pull, "APPROVE", body="Looks right.")
    await wait_status_comment(stack, number, "The base branch was rewritten")
    await wait_phase(stack, number, "awaiting-review")
    assert scheduled(stack, number, "github.merge") == []
    rebuilt = branch_sha(stack, repair_branch(number))
    assert rebuilt is not None and rebuilt != proposed
    assert _tree_of(stack, rebuilt)[1] == (rewritten,)

    await _approve_and_wait_merged(stack, number, pull)
    assert not _has_file(stack, "main", "LEAKED.txt")
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)
    assert file_on_branch(stack, "main", "OTHER.md") == "rewritten\n"
    assert len(scheduled(stack, number, "github.merge")) == 1
    record_history(stack, number, "repair_v2_rebuilt_on_rewritten_base")


@SQLITE_ONLY
@pytest.mark.parametrize("seed", ["rereview"], indirect=True)
async def test_base_moved_rereview_asks_for_a_fresh_approval(stack: LocalStack) -> None:
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    pull = status["pull_number"]
    await push_files(stack, "main", {"CHANGELOG.md": "- unrelated change\n"})

    await review(stack, pull, "APPROVE", body="Looks right.")
    # The reason stays on the status comment while the run waits.
    await wait_status_comment(stack, number, "policy asks for a new review")
    await wait_phase(stack, number, "awaiting-review", timeout=5)
    assert (await github_state(stack, number))["pulls"][0]["merged_at"] is None
    assert scheduled(stack, number, "github.merge") == []

    await _approve_and_wait_merged(stack, number, pull)
    steps = [_step(op) for op in scheduled(stack, number, "commands.verify_candidate")]
    # Rebuilt on the new base and verified there, then a human's fresh approval.
    assert steps[0] == "verify-1" and steps[-1].startswith("reverify-")
    assert len(scheduled(stack, number, "github.merge")) == 1
    state = await github_state(stack, number)
    assert state["pulls"][0]["merged_at"] is not None
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)


# -- 9. cancelled while the agent works ---------------------------------------------------------


def _agent_processes(script: str) -> set[int]:
    """Live (non-zombie) processes running the demo agent with --sleep."""
    found: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if script.encode() in argv and b"--sleep" in argv and state != "Z":
            found.add(int(proc.name))
    return found


def _started_here(pids: set[int]) -> set[int]:
    """Those of ``pids`` that descend from this test process, whose in-process
    worker starts the agent: other pytest workers run the same agent script at
    the same time, and counting theirs failed this test when one of them
    outlived the cancel here."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                parents[int(proc.name)] = int(
                    (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
        except OSError:
            continue

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return {pid for pid in pids if descends(pid)}


async def test_cancel_while_the_agent_runs_stops_it(stack: LocalStack) -> None:
    argv = fix_agent_command(sleep=60)
    script = argv[1]
    before = _agent_processes(script)
    stack.start_repairbot(agent_command=tuple(argv))
    heartbeat_every(stack, 0.2)
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "repairing")
    await wait_for(
        "the agent is running", lambda: bool(_started_here(_agent_processes(script) - before))
    )
    agents = _started_here(_agent_processes(script) - before)

    await stack.gh.remove_label(
        stack.people.owner, stack.repo_name, number, "repairbot", as_user=stack.people.maintainer
    )
    run = await wait_end(stack, number, timeout=20)
    assert run.status == "cancelled", run.error
    # Stopped through its heartbeat, long before its 60 s were up. Every live
    # agent counts here, so one the cancel orphaned (reparented away from this
    # process) still fails the test.
    assert not agents & _agent_processes(script)
    assert run.closed_at is not None and run.closed_at - run.created_at < 30
    assert stack.runtime is not None
    [attempt] = [
        a
        for a in stack.runtime.store.activity_attempts(run.run_id)
        if a["activity"] == "agent.propose_fix"
    ]
    assert attempt["outcome"] == "failed:cancelled"

    state = await github_state(stack, number)
    assert state["pulls"] == []
    assert state["branches"] == ["main"]
    [comment] = state["status_comments"]
    assert "Cancelled." in comment["body"]
    assert f"label was removed by @{stack.people.maintainer}" in comment["body"]


# -- 10. every webhook delivered twice ------------------------------------------------------


async def test_every_webhook_delivered_twice_is_one_repair(stack: LocalStack) -> None:
    await stack.gh.deliveries.duplicate_next(count=10_000)
    stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    status = await wait_phase(stack, number, "awaiting-review")
    await _approve_and_wait_merged(stack, number, status["pull_number"])

    # Every delivery since duplication was turned on (all but the App's
    # installation) reached repairbot twice under one delivery id: the first
    # was taken (202), the second found already recorded (200).
    await stack.gh.deliveries.wait()
    deliveries = [d for d in await stack.gh.deliveries.list() if d["event"] != "installation"]
    codes: dict[str, list[int]] = {}
    for delivery in deliveries:
        codes.setdefault(delivery["guid"], []).append(delivery["status_code"])
    assert codes and all(pair == [202, 200] for pair in codes.values()), codes
    assert {d["event"] for d in deliveries} >= {"issues", "pull_request", "pull_request_review"}

    assert stack.runtime is not None
    repairs = [r for r in stack.runtime.store.list_runs() if r.workflow_name == "repair"]
    assert len(repairs) == 1
    state = await github_state(stack, number)
    assert len(state["status_comments"]) == 1
    [pr] = state["pulls"]
    assert pr["merged_at"] is not None
    assert state["branches"] == ["main"]  # deleted after the merge
    # One squash commit on top of the initial one: merged once.
    assert len(first_parent_history(stack, "main")) == 2
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)


# -- an operator resumes a run parked for a human ------------------------------------------


@SQLITE_ONLY
async def test_a_refused_merge_parks_the_run_and_an_operator_resume_merges(
    stack: LocalStack,
) -> None:
    runtime = stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    [pull] = (await github_state(stack, number))["pulls"]
    # GitHub refuses the merge once for a reason only a human can clear
    # (branch protection, a required check): the run must wait for them.
    await stack.gh.faults.add(
        MERGE_ENDPOINT, "fail", status=405, message="Pull Request is not mergeable", times=1
    )
    await review(stack, pull["number"], "APPROVE", body="Looks right.")

    parked = await wait_end(stack, number)
    assert parked.status == "needs-human", (parked.status, parked.error)
    body = await wait_status_comment(stack, number, "repairbot runs resume")
    assert "GitHub refused the merge" in body
    state = await github_state(stack, number)
    assert [p["merged_at"] for p in state["pulls"]] == [None]

    # The operator cleared the cause; resuming continues at the merge.
    assert await runtime.resume(parked.run_id, "branch protection fixed", by="ops")
    run = await wait_end(stack, number)
    assert run.run_id == parked.run_id  # the same run went on, not a new one
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result
    state = await github_state(stack, number)
    [merged] = state["pulls"]
    assert merged["merged_at"] is not None
    assert len(state["status_comments"]) == 1
    resumed = [e for e in runtime.store.load_events(run.run_id) if e.type == "run_resumed"]
    assert [(e.data.get("by"), e.data.get("reason")) for e in resumed] == [
        ("ops", "branch protection fixed")
    ]
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)


TO_DRAFT = (
    "mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) "
    "{ pullRequest { isDraft } } }"
)


@SQLITE_ONLY
async def test_a_pull_request_turned_back_into_a_draft_is_not_merged_on_resume(
    stack: LocalStack,
) -> None:
    """repairbot marked the pull request ready, GitHub refused the merge, the run
    parked; a maintainer turned the pull request back into a draft ("not yet")
    and an operator resumed the run. It must not mark it ready and merge: it
    asks for a fresh approval, and merges only after one."""
    runtime = stack.start_repairbot(agent_command=tuple(fix_agent_command()))
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "awaiting-review")
    await stack.gh.faults.add(
        MERGE_ENDPOINT, "fail", status=405, message="Pull Request is not mergeable", times=1
    )
    [pull] = (await github_state(stack, number))["pulls"]
    await review(stack, pull["number"], "APPROVE", body="Looks right.")
    parked = await wait_end(stack, number)
    assert parked.status == "needs-human", (parked.status, parked.error)
    [ready] = (await github_state(stack, number))["pulls"]
    assert ready["draft"] is False  # repairbot had marked it ready

    answer = await stack.gh.graphql(
        TO_DRAFT, {"id": pull["node_id"]}, as_user=stack.people.maintainer
    )
    assert answer["data"]["convertPullRequestToDraft"]["pullRequest"]["isDraft"] is True
    assert await runtime.resume(parked.run_id, "retry the merge", by="ops")
    await wait_status_comment(stack, number, "turned back into a draft")
    await wait_phase(stack, number, "awaiting-review")
    [still] = (await github_state(stack, number))["pulls"]
    assert still["draft"] is True and still["merged_at"] is None
    assert len(scheduled(stack, number, "github.merge")) == 1  # only the refused one

    await _approve_and_wait_merged(stack, number, pull["number"])
    assert FIXED_LINE in file_on_branch(stack, "main", LIBRARY)
