"""The repair workflow's other paths on the kit: the same outcomes, phases and
activity calls as tests/e2e/test_repair_scenarios.py asserts, with fakes in
place of the emulator, git, the sandbox and the agent."""

from __future__ import annotations

import copy
import json
from typing import Any

from app.contracts.requests import REVIEW
from app.engine._errors import PermanentError
from app.engine.testing import Call
from tests.workflows.repair_scenario import (
    OPEN_PULL,
    PROPOSED_SHA,
    WORKFLOW_ID,
    approve,
    final_conclusion,
    merged_fakes,
    prepared,
    recorded_result,
    repair_env,
    review,
    review_key,
    start_repair,
    status_body,
)

NOT_VERIFIED_REASON = "The reproduction still fails with the patch applied."


def reproduction(*, reproduced: bool) -> dict[str, Any]:
    answer = copy.deepcopy(recorded_result("commands.run_reproduction"))
    answer["status"] = "failed" if reproduced else "passed"
    answer["reproduced"] = reproduced
    return answer


def not_verified() -> dict[str, Any]:
    answer = copy.deepcopy(recorded_result("commands.verify_candidate"))
    answer.update(verdict="still-reproduces", reason=NOT_VERIFIED_REASON)
    return answer


def readers_are(*readers: str) -> Any:
    """``github.permission``: ``read`` for these users, ``write`` for the rest."""

    def permission(call: Call) -> dict[str, str]:
        return {"permission": "read" if call.input["user"] in readers else "write"}

    return permission


async def test_not_reproduced_ends_without_a_pull_request(kit_db_url: str) -> None:
    fakes = merged_fakes().on("commands.run_reproduction", reproduction(reproduced=False))
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "not-reproduced"
    assert fakes.calls_to("agent.propose_fix") == []
    assert fakes.calls_to("github.pull_request") == []
    assert fakes.calls_to("github.push_branch") == []
    body = status_body(fakes)
    assert "Could not reproduce the bug" in body
    assert "No pull request was opened" in body
    assert "reproduction on the base commit" in body  # the evidence is listed


async def test_invalid_config_is_reported(kit_db_url: str) -> None:
    answer = prepared()
    answer.update(config=None, config_error="line 1: test: [unclosed")
    fakes = merged_fakes().on("workspace.prepare", answer)
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "invalid-config"
    assert fakes.calls_to("commands.run_reproduction") == []
    body = status_body(fakes)
    assert "the repository's repairbot config is invalid" in body
    assert "`.github/repairbot.yml`" in body and "working on it" not in body
    assert final_conclusion(fakes) == "neutral"
    assert fakes.calls_to("github.pull_request") == []


async def test_no_reproduction_is_reported(kit_db_url: str) -> None:
    answer = prepared(reproduce=None)
    answer.update(reproduction=[], reproduction_error="there is no reproduction command")
    fakes = merged_fakes().on("workspace.prepare", answer)
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.result["outcome"] == "no-reproduction", run.result
    assert fakes.calls_to("commands.run_reproduction") == []
    assert fakes.calls_to("agent.propose_fix") == []
    assert "there is no reproduction command" in status_body(fakes)
    assert final_conclusion(fakes) == "neutral"


async def test_permanent_error_in_the_trigger_check_is_reported(kit_db_url: str) -> None:
    fakes = merged_fakes().on("github.permission", PermanentError("GitHub answered 422"))
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "error"
    body = status_body(fakes)
    assert "github.permission" in body and "Stopped by an error" in body
    assert final_conclusion(fakes) == "neutral"
    assert fakes.calls_to("workspace.prepare") == []


async def test_budget_exhausted_after_exactly_the_attempt_budget(kit_db_url: str) -> None:
    fakes = merged_fakes().on("commands.verify_candidate", not_verified())
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "budget-exhausted"
    budget = run.result["contract"]["budgets"]["repair_attempts"]
    assert budget == 3  # the recorded repository's config
    assert len(fakes.calls_to("agent.propose_fix")) == budget
    assert len(fakes.calls_to("commands.verify_candidate")) == budget
    assert fakes.calls_to("github.push_branch") == []
    body = status_body(fakes)
    assert "Gave up: no candidate fix passed verification" in body
    assert f"Repair attempts: {budget} of {budget}" in body


async def test_failed_verification_feeds_a_second_attempt(kit_db_url: str) -> None:
    verified = recorded_result("commands.verify_candidate")
    fakes = merged_fakes().sequence("commands.verify_candidate", not_verified(), verified)
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        status = await env.wait_phase(WORKFLOW_ID, "awaiting-review")
    assert status["proposed_sha"] == PROPOSED_SHA
    first, second = fakes.inputs("agent.propose_fix")
    assert NOT_VERIFIED_REASON not in json.dumps(first)
    assert NOT_VERIFIED_REASON in json.dumps(second)  # the feedback reaches the agent
    assert len(fakes.calls_to("commands.verify_candidate")) == 2
    [pull] = fakes.inputs("github.pull_request")
    assert "| repair attempts | 2 |" in pull["body"]
    assert "Repair attempts: 2 of 3" in status_body(fakes)


async def test_approval_by_a_reader_is_ignored(kit_db_url: str) -> None:
    fakes = merged_fakes().on("github.permission", readers_are("rita"))
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        await approve(env, reviewer="rita", review_id=700009, body="Ship it!")
        await env.settle()
        assert "A review by @rita was ignored" in status_body(fakes)
        assert (await env.query(WORKFLOW_ID))["phase"] == "awaiting-review"
        assert fakes.calls_to("github.merge") == []
        await approve(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.result["outcome"] == "merged", run.result
    assert [m["sha"] for m in fakes.inputs("github.merge")] == [PROPOSED_SHA]


async def test_an_approval_of_another_commit_does_not_count(kit_db_url: str) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        await approve(env, commit="0" * 40, review_id=700008, body="LGTM (the old one)")
        await env.settle()
        assert "it does not count" in status_body(fakes)
        assert fakes.calls_to("github.merge") == []
        assert (await env.query(WORKFLOW_ID))["phase"] == "awaiting-review"


async def test_an_approval_delivered_twice_is_one_merge(kit_db_url: str) -> None:
    """Recovery test 7 at the workflow's level: the same review id is one signal."""
    fakes = merged_fakes()
    payload = review()
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        assert await env.signal(WORKFLOW_ID, REVIEW, payload, dedupe_key=review_key(payload))
        assert not await env.signal(WORKFLOW_ID, REVIEW, payload, dedupe_key=review_key(payload))
        run = await env.wait_status(WORKFLOW_ID)
        reviews = [e for e in await env.history(WORKFLOW_ID) if e.type == "signal_received"]
    assert run.result["outcome"] == "merged", run.result
    assert len(reviews) == 1
    assert len(fakes.calls_to("github.merge")) == 1


async def test_a_branch_deleted_without_a_webhook_is_noticed_by_the_drift_check(
    kit_db_url: str,
) -> None:
    """No event announces it: the drift check (every ``drift_check_seconds``
    while waiting for a review) reads GitHub and ends the run."""
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        observed_before = len(fakes.calls_to("github.observe"))
        gone = {
            "issue_state": "open",
            "pull": OPEN_PULL,
            "branch_sha": None,
            "status_comment": "ok",
            "reviews": [],
        }
        fakes.on("github.observe", gone)
        await env.advance(599)
        assert len(fakes.calls_to("github.observe")) == observed_before  # not yet due
        await env.advance(1)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "branch-deleted", run.result
    assert "branch was deleted" in status_body(fakes)
    assert final_conclusion(fakes) == "neutral"
    assert fakes.calls_to("github.merge") == []
