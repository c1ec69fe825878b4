"""A rate limit whose reset lies past the activity's deadline: the engine waits
durably (a scheduled attempt, no worker held) and goes on, end to end against
the emulator's rate-limit fault."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from gh_scene import Scene
from sqlalchemy import Engine, select

from activities.github import GitHubAccess, GitHubActivities
from app.config import Settings
from app.contracts.github import API, branch_head
from app.engine._context import WorkflowContext
from app.engine._policy import ActivityOptions, Timeouts
from app.engine._registry import Registry, workflow
from app.engine._runtime import Runtime
from app.engine._store.schema import tasks
from app.evidence import DatabaseEvidenceStore

GET_REF = "GET /repos/{owner}/{repo}/git/ref/{ref}"
#: The real activity's contract, with a deadline shorter than the reset GitHub
#: will ask for (the workflow records the options it schedules with).
SHORT = replace(
    branch_head,
    options=ActivityOptions(retry=API, timeouts=Timeouts(start_to_close=30, schedule_to_close=3)),
)


@workflow("read-main")
async def read_main(ctx: WorkflowContext, raw: dict[str, Any]) -> Any:
    return await ctx.activity(SHORT, raw, step="head")


async def test_reset_past_the_deadline_is_waited_out_durably(
    scene: Scene, db_engine: Engine
) -> None:
    # x-ratelimit-remaining: 0 with a reset 6 s away: the app asks for 5-6 s, past
    # the activity's 3 s schedule-to-close.
    await scene.client.faults.add(
        GET_REF, "rate_limit", rate_limit_style="x-ratelimit", retry_after=6
    )
    access = GitHubAccess(factory=scene.factory, git_url="http://unused.invalid")
    registry = Registry.of([read_main])
    registry.register_activities(
        GitHubActivities(access, DatabaseEvidenceStore(db_engine), Settings())
    )
    runtime = Runtime(db_engine, registry, reconcile_interval=0.05)
    await runtime.start_in_process()
    try:
        raw = {"installation_id": scene.installation_id, "repo": "octo/demo", "branch": "main"}
        await runtime.start_workflow("read-main", "rl-1", raw)
        waiting = await _first_attempt_failed(db_engine)
        # Between attempts: scheduled (no lease, no worker), deadline moved past the wait.
        assert waiting.status == "scheduled" and waiting.lease_expires_at is None
        assert waiting.schedule_to_close_deadline > waiting.next_attempt_at
        assert "rate limited" in waiting.last_failure["message"]
        run = await runtime.wait_for("rl-1", timeout=60)
    finally:
        await runtime.stop()
    assert run.status == "completed", run.error
    assert run.result == {"sha": scene.head}
    outcomes = [a["outcome"] for a in runtime.store.activity_attempts(run.run_id)]
    assert outcomes == ["failed:transient", "completed"]


async def _first_attempt_failed(db_engine: Engine) -> Any:
    for _ in range(1000):
        with db_engine.connect() as conn:
            row = conn.execute(select(tasks)).first()
        if row is not None and row.attempt == 1 and row.last_failure is not None:
            return row
        await asyncio.sleep(0.01)
    raise AssertionError("the rate-limited attempt never failed")
