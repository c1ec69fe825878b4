"""The triage workflows (version 2) on the kit: whether a label starts the
issue's repair run, and whether a close cancels it. They look at and act on
the real repair run (started with the recorded merge's answers) through the
engine's run commands. The whole path over webhooks is in
tests/e2e/test_steering.py."""

from __future__ import annotations

from typing import Any

from app.engine import ActivityCancelled
from app.engine.testing import Call, FakeActivities, RunStuck, WorkflowEnvironment
from app.main.catalog import build_registry
from tests.workflows.repair_scenario import REQUEST, Held, merged_fakes, recorded_result
from tests.workflows.test_slash_commands import WORKFLOW_ID, start_repair

TRIAGE_ID = "triage:delivery-1"
PULL_NUMBER = recorded_result("github.pull_request")["number"]


def kit(fakes: FakeActivities, url: str) -> Any:
    return WorkflowEnvironment.start(build_registry(), fakes, database_url=url)


def triage_fakes(*, readers: tuple[str, ...] = ()) -> FakeActivities:
    def permission(call: Call) -> dict[str, str]:
        return {"permission": "read" if call.input["user"] in readers else "write"}

    return (
        merged_fakes()
        .on("github.permission", permission)
        .on("triage.trigger_config", {"trigger_label": "repairbot"})
    )


async def triage(env: WorkflowEnvironment, name: str, input: dict[str, Any]) -> Any:
    """Run one triage to its end (moving the clock while it waits) and return it."""
    return await triage_end(env, await env.start_workflow(name, TRIAGE_ID, input))


async def triage_end(env: WorkflowEnvironment, run_id: str) -> Any:
    while True:
        try:
            return await env.wait_status(run_id)
        except RunStuck:  # quiet: it waits on its timer
            await env.advance(60)


def label(name: str = "repairbot") -> dict[str, Any]:
    return {"request": REQUEST | {"label": name}, "default_trigger": "repairbot"}


def closed_by(closer: str) -> dict[str, Any]:
    return {"request": REQUEST, "closer": closer}


async def held_repair(env: WorkflowEnvironment, fakes: FakeActivities) -> Held:
    held = Held(then=recorded_result("agent.propose_fix"))
    fakes.on("agent.propose_fix", held)
    await start_repair(env)
    await env.wait_phase(WORKFLOW_ID, "repairing")
    await env.wait_called("agent.propose_fix")
    return held


async def test_another_label_starts_nothing(kit_db_url: str) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        run = await triage(env, "label-triage", label("bug"))
        repair = await env.runtime.read(env.store.find_run, WORKFLOW_ID)
    assert run.result == {
        "started": False,
        "run_id": None,
        "why": "'bug' is not the trigger 'repairbot'",
    }
    assert repair is None


async def test_the_trigger_starts_the_issues_run(kit_db_url: str) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        run = await triage(env, "label-triage", label())
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
    assert run.result == {"started": True, "run_id": f"{WORKFLOW_ID}/1", "why": None}


async def test_the_trigger_beside_an_active_run_starts_nothing(kit_db_url: str) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        run = await triage(env, "label-triage", label())
        held.release(recorded_result("agent.propose_fix"))
    assert run.result == {
        "started": False,
        "run_id": f"{WORKFLOW_ID}/1",
        "why": "a run is already active",
    }


async def test_a_relabel_while_the_run_cancels_starts_the_next_once_it_ended(
    kit_db_url: str,
) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        await env.cancel(WORKFLOW_ID, "the label was removed")
        run_id = await env.start_workflow("label-triage", TRIAGE_ID, label())

        async def waiting() -> bool | None:
            history = await env.history(run_id)
            return True if any(e.type == "timer_started" for e in history) else None

        await env.wait_until("the triage waiting for the cancel", waiting)
        held.release(ActivityCancelled("told to stop"))
        first = await env.wait_status(f"{WORKFLOW_ID}/1")
        run = await triage_end(env, run_id)
    assert first.status in ("cancelled", "cleanup-incomplete"), first.status
    assert run.result == {"started": True, "run_id": f"{WORKFLOW_ID}/2", "why": None}


async def test_a_writers_close_cancels_the_run(kit_db_url: str) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        run = await triage(env, "close-triage", closed_by("maya"))
        repair = await env.run(f"{WORKFLOW_ID}/1")
        asked = [e.data for e in await env.history(repair.run_id) if e.type == "cancel_requested"]
        held.release(ActivityCancelled("told to stop"))
        await env.wait_status(WORKFLOW_ID)
    assert run.result == {"cancelled": True, "why": None}
    assert [a["reason"] for a in asked] == ["the issue was closed by @maya"]


async def test_a_readers_close_leaves_the_run_going(kit_db_url: str) -> None:
    fakes = triage_fakes(readers=("rita",))
    async with kit(fakes, kit_db_url) as env:
        held = await held_repair(env, fakes)
        run = await triage(env, "close-triage", closed_by("rita"))
        repair = await env.run(WORKFLOW_ID)
        held.release(recorded_result("agent.propose_fix"))
    assert run.result == {"cancelled": False, "why": "@rita has read access"}
    assert repair.status == "running"
    said = [c["body"] for c in fakes.inputs("github.comment") if c["op_step"] == "rita"]
    assert len(said) == 1 and "only people with write access" in said[0]


async def test_a_close_by_the_runs_merge_is_not_a_cancel(kit_db_url: str) -> None:
    pull = {"number": PULL_NUMBER, "state": "closed", "merged": True, "head_sha": "abc"}
    fakes = triage_fakes().on("github.read_pull", pull)
    async with kit(fakes, kit_db_url) as env:
        await start_repair(env)
        await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        run = await triage(env, "close-triage", closed_by("maya"))
        repair = await env.run(WORKFLOW_ID)
    assert run.result == {"cancelled": False, "why": f"closed by the merge of #{PULL_NUMBER}"}
    assert repair.status == "running"


async def test_a_close_without_a_run_cancels_nothing(kit_db_url: str) -> None:
    fakes = triage_fakes()
    async with kit(fakes, kit_db_url) as env:
        run = await triage(env, "close-triage", closed_by("maya"))
    assert run.result == {"cancelled": False, "why": "no run to cancel"}
