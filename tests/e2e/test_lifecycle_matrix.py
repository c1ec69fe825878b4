"""The lifecycle matrix: a run held in each phase meets what humans (and
GitHub) do, over real webhooks against the emulator. Each case asserts the
run's end and GitHub's state read from the emulator: branches, pull
requests, the status comment and the check run.

Pairs left out, and why:
- review dismissed and approval expired only mean something once an approval
  exists: tests/e2e/test_steering.py (recovery tests 8 and 13);
- base moved matters at the merge: test_repair_scenarios.py (reverify and
  rereview);
- pull-request events before ``publishing`` have no pull request to act on;
- worker SIGKILL in each phase: test_repair_crashes.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from app.demo.project import fix_agent_command, write_project
from app.demo.stack import LocalStack
from tests.e2e.scenario import (
    branch_sha,
    delete_branch_as,
    file_on_branch,
    final_check,
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

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
MERGE_ENDPOINT = "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"
PULL_ENDPOINT = "GET /repos/{owner}/{repo}/pulls/{pull_number}"


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    folder = write_project(tmp_path / "project")
    config = folder / ".github" / "repairbot.yml"
    # A short drift check, so that what no webhook announces is noticed in a test.
    config.write_text(config.read_text() + "drift_check_seconds: 5\n")
    return folder


# -- holding a run in a phase --------------------------------------------------------


def all_faults_fired(stack: LocalStack) -> Callable[[], Awaitable[bool]]:
    """Whether every request the emulator was told to hold has arrived."""

    async def fired() -> bool:
        return all(fault["fired"] == 1 for fault in await stack.gh.faults.list())

    return fired


async def hold_in(stack: LocalStack, phase: str) -> tuple[int, dict[str, Any]]:
    """Start a run and return once it is in ``phase`` (kept there a while)."""
    sleep = 60 if phase == "repairing" else 0
    stack.start_repairbot(agent_command=tuple(fix_agent_command(sleep=sleep)))
    heartbeat_every(stack, 0.2)
    if phase == "publishing":
        await stack.gh.faults.add("POST /repos/{owner}/{repo}/pulls", "delay", delay=4, times=1)
    if phase == "preparing":
        # The base branch's head is read while preparing: GitHub is slow to answer.
        await stack.gh.faults.add(
            "GET /repos/{owner}/{repo}/git/ref/{ref}", "delay", delay=6, times=1
        )
    if phase == "reproducing":
        # A setup step that takes a minute (as installing dependencies can).
        config = file_on_branch(stack, "main", ".github/repairbot.yml")
        await push_files(stack, "main", {".github/repairbot.yml": config + "setup: ['sleep 60']\n"})
    number = await open_labelled_issue(stack)
    if phase == "preparing":
        status = await wait_phase(stack, number, "preparing")

        await wait_for("the base branch read reached GitHub", all_faults_fired(stack))
    elif phase == "reproducing":
        status = await wait_phase(stack, number, "reproducing", timeout=120)
    elif phase == "repairing":
        status = await wait_phase(stack, number, "repairing")
    elif phase == "publishing":
        status = await wait_phase(stack, number, "publishing", timeout=120)
        await wait_for(
            "the branch is pushed", lambda: branch_sha(stack, "repairbot/issue-1") is not None
        )
        # The event meets the pull request's creation in flight (held by GitHub),
        # not the push's result on its way to the history.
        await wait_for("the pull request request reached GitHub", all_faults_fired(stack))
    else:
        status = await wait_phase(stack, number, "awaiting-review", timeout=120)
        # The phase is in the state before its comment is on GitHub: wait for both.
        await wait_status_comment(stack, number, "Waiting for a review", timeout=60)
    if phase == "merging":
        # The merge request is held in the emulator while the event happens.
        await stack.gh.faults.add(MERGE_ENDPOINT, "delay", delay=4, times=1)
        await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
        status = await wait_phase(stack, number, "merging", timeout=60)
        await wait_for("the merge request reached GitHub", all_faults_fired(stack))
    return number, status


# -- events --------------------------------------------------------------------------


async def cancel_command(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    people = stack.people
    await stack.gh.comment(
        people.owner, stack.repo_name, number, "/repair cancel", as_user=people.maintainer
    )


async def unlabel(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    people = stack.people
    await stack.gh.remove_label(
        people.owner, stack.repo_name, number, "repairbot", as_user=people.maintainer
    )


async def close_issue(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    people = stack.people
    await stack.gh.rest(
        "PATCH",
        f"/repos/{people.owner}/{stack.repo_name}/issues/{number}",
        as_user=people.maintainer,
        body={"state": "closed"},
    )


async def merge_pull(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    people = stack.people
    pull = status["pull_number"]
    await stack.gh.mark_ready(people.owner, stack.repo_name, pull, as_user=people.maintainer)
    await stack.gh.rest(
        "PUT",
        f"/repos/{people.owner}/{stack.repo_name}/pulls/{pull}/merge",
        as_user=people.maintainer,
        body={"merge_method": "squash"},
    )


async def delete_branch(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    await delete_branch_as(stack, f"repairbot/issue-{number}", as_user=stack.people.owner)


async def delete_status_comment(stack: LocalStack, number: int, status: dict[str, Any]) -> None:
    people = stack.people
    state = await github_state(stack, number)
    [comment] = state["status_comments"]
    await stack.gh.rest(
        "DELETE",
        f"/repos/{people.owner}/{stack.repo_name}/issues/comments/{comment['id']}",
        as_user=people.owner,
    )


Event = Callable[[LocalStack, int, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class End:
    """What the case must end with."""

    status: str
    outcome: str
    #: The pull request's state on GitHub: None (none opened), open, closed, merged.
    pull: str | None
    branch_kept: bool
    check: str | None
    says: str


#: A pull request that may end either way; the status comment must say which.
MERGED_OR_CLOSED = "merged-or-closed"
CANCELLED = End("cancelled", "cancelled", "closed", False, "cancelled", "Cancelled")
CANCELLED_EARLY = End("cancelled", "cancelled", None, False, None, "Cancelled")

#: The cases whose rule is the workflow's alone (a cancel command in
#: preparing, reproducing or repairing; a human closing the pull request or
#: pushing to its branch) are tests/workflows/test_repair_lifecycle.py's, on
#: the workflow test kit; these keep what the stack adds: the webhook that
#: becomes the cancel or the signal, and GitHub's state afterwards.
CASES: list[tuple[str, str, Event, End]] = [
    ("reproducing", "unlabel", unlabel, CANCELLED_EARLY),
    ("repairing", "issue-closed", close_issue, CANCELLED_EARLY),
    ("publishing", "unlabel", unlabel, CANCELLED),
    ("awaiting-review", "cancel-command", cancel_command, CANCELLED),
    ("awaiting-review", "unlabel", unlabel, CANCELLED),
    ("awaiting-review", "issue-closed", close_issue, CANCELLED),
    (
        # The merge is in flight when the cancel arrives. Either it completes
        # (the run reports the merge, which the cancel came too late to stop)
        # or it does not (the pull request is closed): the status comment and
        # the check run must say which, as GitHub shows.
        "merging",
        "cancel-command",
        cancel_command,
        End("cancelled", "cancelled", MERGED_OR_CLOSED, False, "cancelled", "Cancelled"),
    ),
    (
        "awaiting-review",
        "pr-merged-by-human",
        merge_pull,
        End("completed", "merged-by-human", "merged", False, "neutral", "merged by a human"),
    ),
    (
        "awaiting-review",
        "branch-deleted",
        delete_branch,
        End("completed", "branch-deleted", "closed", False, "neutral", "branch was deleted"),
    ),
]
#: Cheap enough for every run of the default suite; the rest are marked slow.
FAST = {("awaiting-review", "cancel-command"), ("awaiting-review", "pr-merged-by-human")}


def _params() -> list[Any]:
    params = []
    for phase, name, event, end in CASES:
        marks = [] if (phase, name) in FAST else [pytest.mark.slow]
        params.append(pytest.param(phase, event, end, id=f"{phase}-{name}", marks=marks))
    return params


@SQLITE_ONLY
@pytest.mark.parametrize(("phase", "event", "end"), _params())
async def test_lifecycle(stack: LocalStack, phase: str, event: Event, end: End) -> None:
    number, status = await hold_in(stack, phase)
    await event(stack, number, status)
    run = await wait_end(stack, number, timeout=120)
    assert run.status == end.status, (run.status, run.error, run.result)
    result = run.result or {}
    if run.status == "completed":
        assert result["outcome"] == end.outcome, result
    state = await github_state(stack, number)
    if end.pull is None:
        assert state["pulls"] == []
    else:
        [pull] = state["pulls"]
        shown = "merged" if pull["merged_at"] else pull["state"]
        if end.pull == MERGED_OR_CLOSED:
            assert shown in ("merged", "closed"), pull
            words = "(merged)" if shown == "merged" else "(closed"
            assert words in await status_comment(stack, number)
            if shown == "merged":
                end = replace(end, check="success", says="too late")
        else:
            assert shown == end.pull, pull
    branch = f"repairbot/issue-{number}"
    assert (branch in state["branches"]) == end.branch_kept, state["branches"]
    body = await status_comment(stack, number)
    assert end.says.lower() in body.lower(), body
    if state["pulls"]:
        assert f"Pull request: #{state['pulls'][0]['number']}" in body
    if end.check is not None:
        sha = state["pulls"][0]["head"]["sha"] if state["pulls"] else None
        proposed = status.get("proposed_sha") or sha
        assert proposed is not None
        check = await final_check(stack, proposed)
        assert check["conclusion"] == end.check


@SQLITE_ONLY
async def test_a_merge_whose_answer_is_lost_to_a_cancel_is_reported_merged(
    stack: LocalStack,
) -> None:
    """GitHub merges, then holds the answer and drops it, and the merge
    activity's own read-back fails too: the activity fails without knowing,
    and as a cancel arrived meanwhile it is not retried. Before any cleanup
    the run reads the pull request back: merged at the approved commit, so it
    reports the merge and never closes the pull request over it."""
    number, status = await hold_in(stack, "awaiting-review")
    await stack.gh.faults.add(MERGE_ENDPOINT, "drop", delay=8, times=1)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    await wait_phase(stack, number, "merging", timeout=60)
    await wait_for("the merge request reached GitHub", all_faults_fired(stack))
    await stack.gh.faults.add(PULL_ENDPOINT, "fail", status=502, times=1)
    await cancel_command(stack, number, status)

    run = await wait_end(stack, number, timeout=120)
    assert run.status == "cancelled", (run.status, run.error)
    assert run.result["outcome"] == "merged", run.result
    assert run.result["merge_commit_sha"], run.result
    # The merge was asked once, its answer lost after the cancel came: the
    # cancel stopped the retry, and nothing closed the pull request.
    assert stack.runtime is not None
    history = stack.runtime.store.load_events(run.run_id)
    [merge_cmd] = [
        e.data["cmd"] for e in history
        if e.type == "activity_scheduled" and e.data["activity"] == "github.merge"
    ]  # fmt: skip
    [end] = [
        e for e in history
        if e.type in ("activity_completed", "activity_failed") and e.data["cmd"] == merge_cmd
    ]  # fmt: skip
    assert end.type == "activity_failed", end
    assert end.seq > next(e.seq for e in history if e.type == "cancel_requested")
    assert scheduled(stack, number, "github.close_pull") == []
    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["merged_at"] is not None
    assert pull["merge_commit_sha"] == run.result["merge_commit_sha"]
    assert state["branches"] == ["main"]  # deleted after the merge
    body = await status_comment(stack, number)
    assert f"Pull request: #{pull['number']} (merged)" in body
    assert "too late: GitHub had already merged the approved commit" in body
    assert "Merged the fix." in body
    check = await final_check(stack, status["proposed_sha"])
    assert check["conclusion"] == "success"
    comments = await stack.gh.rest(
        "GET",
        f"/repos/{stack.people.owner}/{stack.repo_name}/issues/{pull['number']}/comments",
        as_user=stack.people.owner,
    )
    assert not any("closed this pull request" in c["body"] for c in comments)
    record_history(stack, number, "repair_v2_merge_answer_lost_to_a_cancel")


@SQLITE_ONLY
@pytest.mark.slow
async def test_a_deleted_status_comment_is_written_again(stack: LocalStack) -> None:
    number, status = await hold_in(stack, "awaiting-review")
    await delete_status_comment(stack, number, status)
    await wait_status_comment(stack, number, "was deleted by someone", timeout=60)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result
    assert len((await github_state(stack, number))["status_comments"]) == 1


@SQLITE_ONLY
@pytest.mark.slow
async def test_cancel_with_every_webhook_delivered_twice(stack: LocalStack) -> None:
    await stack.gh.deliveries.duplicate_next(count=10_000)
    number, status = await hold_in(stack, "awaiting-review")
    await cancel_command(stack, number, status)
    run = await wait_end(stack, number, timeout=120)
    assert run.status == "cancelled", run.error
    state = await github_state(stack, number)
    [pull] = state["pulls"]
    assert pull["state"] == "closed" and state["branches"] == ["main"]
    assert len(state["status_comments"]) == 1
    assert stack.runtime is not None
    commands = [r for r in stack.runtime.store.list_runs() if r.workflow_name == "slash-command"]
    assert len(commands) == 1
    record_history(stack, number, "repair_v2_cancelled_awaiting_review")


@SQLITE_ONLY
@pytest.mark.slow
async def test_a_workspace_removed_mid_attempt_is_rebuilt(stack: LocalStack) -> None:
    """Recovery test 9: the workspace disappears under the agent; the attempt is
    retried in a workspace rebuilt from its recorded inputs and the fix merges."""
    stack.start_repairbot(agent_command=tuple(fix_agent_command(sleep=3)))
    heartbeat_every(stack, 0.2)
    assert stack.settings is not None
    workspaces = stack.settings.workspaces_dir
    number = await open_labelled_issue(stack)
    await wait_phase(stack, number, "repairing", timeout=120)

    def some_workspace() -> bool:
        return workspaces.exists() and any(workspaces.iterdir())

    await wait_for("the agent's workspace exists", some_workspace)
    for folder in list(workspaces.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)
    status = await wait_phase(stack, number, "awaiting-review", timeout=180)
    await review(stack, status["pull_number"], "APPROVE", body="Looks right.")
    run = await wait_end(stack, number)
    assert run.result["outcome"] == "merged", run.result
    [pull] = (await github_state(stack, number))["pulls"]
    assert pull["merged_at"] is not None
