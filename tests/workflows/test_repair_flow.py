"""The repair workflow's rules with fake activities (no emulator, git, sandbox
or agent): which phases it goes through, what it ends with, what it calls."""

from __future__ import annotations

from tests.workflows.repair_scenario import (
    PROPOSED_SHA,
    WORKFLOW_ID,
    approve,
    merged_fakes,
    repair_env,
    start_repair,
)


async def test_an_approved_fix_is_merged(kit_db_url: str) -> None:
    fakes = merged_fakes()
    async with repair_env(fakes, kit_db_url) as env:
        await start_repair(env)
        status = await env.wait_phase(WORKFLOW_ID, "awaiting-review")
        assert status["proposed_sha"] == PROPOSED_SHA
        await approve(env)
        run = await env.wait_status(WORKFLOW_ID)
    assert run.status == "completed", run.error
    assert run.result["outcome"] == "merged", run.result
    assert fakes.unexpected == []
    print(fakes.operations())
