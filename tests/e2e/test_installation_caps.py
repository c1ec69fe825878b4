"""Per-installation caps (issue 19), over real webhooks against the emulator:
a run beyond the concurrency cap waits and says so on the issue, then starts
when a slot frees; a run after the day's spend cap stops before any work."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import insert

from app.demo.project import fix_agent_command, write_project
from app.demo.stack import LocalStack
from app.engine._store.schema import runs, tasks
from app.operations.installation_caps import PRICED_ACTIVITY
from tests.e2e.scenario import (
    github_state,
    open_labelled_issue,
    status_comment,
    wait_end,
    wait_phase,
    wait_status_comment,
)

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
WAITING = "Waiting: 1 runs of this installation are active; this run starts when one ends."


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


@SQLITE_ONLY
async def test_a_run_beyond_the_cap_waits_for_a_slot_and_says_so(stack: LocalStack) -> None:
    stack.start_repairbot(
        agent_command=tuple(fix_agent_command()), max_active_runs_per_installation=1
    )
    first = await open_labelled_issue(stack)
    await wait_phase(stack, first, "reproducing")  # holds the installation's one slot
    second = await open_labelled_issue(stack)
    await wait_status_comment(stack, second, WAITING, timeout=60)
    # The first run waits for its review (no slot needed): the second starts.
    await wait_phase(stack, first, "awaiting-review", timeout=120)
    proposed = await wait_phase(stack, second, "awaiting-review", timeout=180)
    assert proposed["pull_number"]  # it went on to propose its fix
    assert WAITING not in await status_comment(stack, second)


@SQLITE_ONLY
async def test_a_run_after_the_days_spend_cap_stops_before_any_work(
    stack: LocalStack,
) -> None:
    runtime = stack.start_repairbot(
        agent_command=tuple(fix_agent_command()), max_spend_usd_per_day_per_installation=1.0
    )
    # Earlier today, another run of this installation spent $1.50 on the model.
    now = time.time()
    with runtime.engine.begin() as conn:
        conn.execute(
            insert(runs).values(
                run_id="earlier",
                workflow_id="repair:earlier",
                workflow_name="repair",
                workflow_version=2,
                status="completed",
                input={"repo": stack.repo, "installation_id": stack.installation_id},
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            insert(tasks).values(
                run_id="earlier",
                cmd=1,
                activity=PRICED_ACTIVITY,
                operation_id="earlier:propose-1",
                input={},
                input_hash="x",
                options={},
                status="completed",
                scheduled_at=now,
                next_attempt_at=now,
                result={"cost_usd": 1.5},
                closed_at=now,
            )
        )
    number = await open_labelled_issue(stack)
    run = await wait_end(stack, number, timeout=90)
    assert run.result["outcome"] == "cost-budget-exhausted", run.result
    comment = await status_comment(stack, number)
    assert "have spent $1.50 on the model today (UTC), and its daily cap is $1.00" in comment
    state = await github_state(stack, number)
    assert state["branches"] == ["main"] and state["pulls"] == []
