"""The lifecycle matrix on the kit: a run held in each phase meets a cancel
(what ``/repair cancel``, removing the label and closing the issue all become,
see handlers/issues.py and handlers/slash.py) or a human's action on its pull
request. Same ends as tests/e2e/test_lifecycle_matrix.py, read from the
activities the run called instead of from GitHub; the e2e file keeps the
cases that test the stack (webhooks, the emulator's state)."""

from __future__ import annotations

from typing import Any

import pytest

from app.contracts.requests import PR_CLOSED, PR_SYNCHRONIZED
from app.engine._errors import ActivityCancelled
from app.engine.testing import FakeActivities, WorkflowEnvironment
from tests.workflows.repair_scenario import (
    PROPOSED_SHA,
    PULL_NUMBER,
    WORKFLOW_ID,
    Held,
    approve,
    final_conclusion,
    merged_fakes,
    pull_closed,
    recorded_result,
    repair_env,
    start_repair,
    status_body,
)

#: Phase -> the activity held in flight there.
HELD_IN = {
    "preparing": "github.branch_head",
    "reproducing": "commands.run_reproduction",
    "repairing": "agent.propose_fix",
    "publishing": "github.pull_request",
}


async def hold_in(
    env: WorkflowEnvironment, fakes: FakeActivities, phase: str
) -> tuple[Held | None, Any]:
    held = None
    if phase in HELD_IN:
        held = Held(then=recorded_result(HELD_IN[phase]))
        fakes.on(HELD_IN[phase], held)
    await start_repair(env)
    if phase == "preparing":
        # The base branch's head is read before the phase is first reported.
        await env.wait_called("github.branch_head")
        return held, await env.query(WORKFLOW_ID)
    status = await env.wait_phase(WORKFLOW_ID, phase)
    if phase in HELD_IN:
        await env.wait_called(HELD_IN[phase])  # the phase's activity is in flight
    return held, status


@pytest.mark.parametrize("phase", ["preparing", "reproducing", "repairing"])
async def test_a_cancel_before_publishing_ends_with_nothing_on_github(
    kit_db_url: str, phase: str
) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        held, _ = await hold_in(env, fakes, phase)
        await env.cancel(WORKFLOW_ID, "/repair cancel by @maya")
        await env.wait_until("the run stopping its work", _stopping(env))
        assert held is not None
        held.release(ActivityCancelled("told to stop"))
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "cancelled", (run.status, run.error)
    assert run.result["outcome"] == "cancelled"
    assert fakes.calls_to("github.pull_request") == []
    assert fakes.calls_to("github.push_branch") == []
    assert "Cancelled" in status_body(fakes)


async def test_a_cancel_while_the_pull_request_is_created_closes_it(kit_db_url: str) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        held, _ = await hold_in(env, fakes, "publishing")
        await env.cancel(WORKFLOW_ID, "the 'repairbot' label was removed by @maya")
        await env.wait_until("the run stopping its work", _stopping(env))
        assert held is not None
        held.release(recorded_result("github.pull_request"))  # GitHub made it meanwhile
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "cancelled", (run.status, run.error)
    [closed] = fakes.inputs("github.close_pull")
    assert closed["number"] == PULL_NUMBER
    assert len(fakes.calls_to("github.delete_branch")) == 1
    assert final_conclusion(fakes) == "cancelled"
    assert "Cancelled" in status_body(fakes)


async def test_a_cancel_while_awaiting_review_closes_the_pull_and_deletes_the_branch(
    kit_db_url: str,
) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await hold_in(env, fakes, "awaiting-review")
        await env.cancel(WORKFLOW_ID, "/repair cancel by @maya")
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "cancelled" and run.result["outcome"] == "cancelled"
    assert [c["number"] for c in fakes.inputs("github.close_pull")] == [PULL_NUMBER]
    [deleted] = fakes.inputs("github.delete_branch")
    assert deleted["sha"] == PROPOSED_SHA
    assert fakes.calls_to("github.merge") == []
    assert final_conclusion(fakes) == "cancelled"
    assert f"Pull request: #{PULL_NUMBER}" in status_body(fakes)


@pytest.mark.parametrize(
    ("signal", "payload", "outcome", "says", "branch_kept"),
    [
        (PR_CLOSED, pull_closed(merged=False), "closed-by-human", "closed by a human", True),
        (PR_CLOSED, pull_closed(merged=True), "merged-by-human", "merged by a human", False),
        (
            PR_SYNCHRONIZED,
            {"number": PULL_NUMBER, "head_sha": "6" * 40, "by": "maya"},
            "human-pushed",
            "a human pushed",
            True,
        ),
    ],
    ids=["pr-closed-by-human", "pr-merged-by-human", "human-push"],
)
async def test_a_humans_hand_on_the_pull_request_ends_the_run(
    kit_db_url: str,
    signal: str,
    payload: dict[str, Any],
    outcome: str,
    says: str,
    branch_kept: bool,
) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await hold_in(env, fakes, "awaiting-review")
        await env.signal(WORKFLOW_ID, signal, payload, dedupe_key=f"{signal}:1")
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", (run.status, run.error)
    assert run.result["outcome"] == outcome, run.result
    assert (fakes.calls_to("github.delete_branch") == []) == branch_kept
    assert fakes.calls_to("github.merge") == []
    assert fakes.calls_to("github.close_pull") == []
    assert says in status_body(fakes).lower()
    assert final_conclusion(fakes) == "neutral"


async def test_a_merge_that_lands_before_the_cancel_is_reported_merged(kit_db_url: str) -> None:
    """The cancel arrives while the merge is in flight and GitHub merges
    anyway: the run reports the merge, too late to stop, and never closes the
    pull request over it."""
    fakes = merged_fakes()
    merge = Held()
    fakes.on("github.merge", merge)
    async with repair_env(fakes, kit_db_url) as env:
        await hold_in(env, fakes, "awaiting-review")
        await approve(env)
        await env.wait_phase(WORKFLOW_ID, "merging")
        await env.wait_called("github.merge")
        await env.cancel(WORKFLOW_ID, "/repair cancel by @maya")
        await env.wait_until("the run stopping its work", _stopping(env))
        merge.release(recorded_result("github.merge"))
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "cancelled", (run.status, run.error)
    assert run.result["outcome"] == "merged", run.result
    assert fakes.calls_to("github.close_pull") == []
    body = status_body(fakes)
    assert "too late: GitHub had already merged the approved commit" in body
    assert final_conclusion(fakes) == "success"


def _stopping(env: WorkflowEnvironment) -> Any:
    """The cancel reached the run's code: it waits for its activity in flight."""

    async def stopping() -> bool | None:
        run = await env.run(WORKFLOW_ID)
        return True if run.cancel_phase == "stopping-active-work" else None

    return stopping
