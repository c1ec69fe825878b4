"""Run actions through the API and the action layer (app/web/actions.py):
who acted is recorded in the run's history."""

from __future__ import annotations

from urllib.parse import quote, unquote

import pytest

from app.operations.api_tokens import create_token
from app.web import actions
from tests.dashboard.conftest import World
from tests.dashboard.support import settle


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
    assert terminated.data["reason"] == "runaway"
    assert terminated.data["by"] == "token:ops-bot"


async def test_an_action_the_run_state_does_not_allow_is_refused(world: World) -> None:
    run = world.runtime.store.load_run(world.runs["widgets#1"])
    assert run is not None
    with pytest.raises(actions.ActionUnavailable):
        await actions.perform(world.runtime, run, "resume", reason="x", by="@maya")
    with pytest.raises(actions.ActionUnavailable):
        await actions.perform(world.runtime, run, "retry", reason="x", by="@maya")
    with pytest.raises(actions.ActionUnavailable):
        await actions.perform(world.runtime, run, "explode", reason="x", by="@maya")


async def test_retry_starts_a_new_run_of_a_closed_one(world: World) -> None:
    await world.runtime.cancel("repair:octo/widgets#1", "first try", by="@octo")
    run = await world.runtime.wait_for(world.runs["widgets#1"], statuses=("cancelled",))
    assert actions.available(run) == ["retry"]
    async with world.browser() as client:
        await world.sign_in(client, world.people.maintainer)
        page = await client.get(f"/runs/{quote(run.run_id, safe='')}")
        assert 'name="action" value="retry"' in page.text
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        done = await client.post(
            f"/runs/{quote(run.run_id, safe='')}/actions",
            data={"action": "retry", "reason": "flaky runner", "csrf": csrf},
        )
        assert done.status_code == 303
        new_run_id = done.headers["location"].split("?")[0].removeprefix("/runs/")
    new = world.runtime.store.load_run(unquote(new_run_id))
    assert new is not None and new.run_id != run.run_id
    assert new.workflow_id == run.workflow_id and new.status == "running"
    # Let the new run reach its wait before the fixture stops the runtime:
    # stopping the in-process dispatcher while a fresh run's first jobs are in
    # flight can hang (an engine issue reported separately).
    await settle(world.runtime, [new.run_id])
    started = world.runtime.store.load_events(new.run_id)[0].data
    assert started["operator"] == {
        "action": "retry",
        "retry_of": run.run_id,
        "reason": "flaky runner",
        "by": "@maya",
    }
