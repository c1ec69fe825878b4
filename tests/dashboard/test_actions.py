"""Run actions through the API and the action layer (app/web/actions.py):
who acted is recorded in the run's history."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from app.api_tokens import create_token
from app.web import actions
from tests.dashboard.conftest import World


async def test_terminate_through_the_api_records_the_token(world: World) -> None:
    token = create_token(world.runtime.store, "ops-bot", {"read", "act"})
    run_id = world.runs["widgets#2"]
    async with world.browser() as client:
        answer = await client.post(
            f"/api/runs/{quote(run_id, safe='')}/actions/terminate",
            json={"reason": "runaway"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 202, answer.text
        assert answer.json()["ok"] is True
        again = await client.post(
            f"/api/runs/{quote(run_id, safe='')}/actions/terminate",
            json={"reason": "runaway"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert again.status_code == 409  # a closed run has nothing to terminate
    run = world.runtime.store.load_run(run_id)
    assert run is not None and run.status == "terminated"
    terminated = world.runtime.store.load_events(run_id)[-1]
    assert terminated.type == "workflow_terminated"
    assert terminated.data["reason"] == "runaway (by token:ops-bot)"


async def test_an_action_the_run_state_does_not_allow_is_refused(world: World) -> None:
    run = world.runtime.store.load_run(world.runs["widgets#1"])
    assert run is not None
    with pytest.raises(actions.ActionUnavailable):
        await actions.perform(world.runtime, run, "resume", reason="x", by="@maya")
    with pytest.raises(actions.ActionUnavailable):
        await actions.perform(world.runtime, run, "explode", reason="x", by="@maya")


@pytest.mark.xfail(
    strict=True,
    reason="runtime.resume and app.run_actions.retry_run arrive with the run lifecycle "
    "work; app/web/actions.py lists them in SUPPORTED then",
)
async def test_retry_starts_a_new_run_of_a_closed_one(world: World) -> None:
    await world.runtime.cancel("repair:octo/widgets#1", "first try")
    run = await world.runtime.wait_for(world.runs["widgets#1"], statuses=("cancelled",))
    assert "retry" in actions.available(run)
    result = await actions.perform(world.runtime, run, "retry", reason="again", by="@maya")
    assert result.ok and result.new_run_id and result.new_run_id != run.run_id
