"""The world the dashboard tests sign in to: an emulated GitHub with people
of every access level, and repairbot runs in two repositories.

``repair`` here is a small real workflow (not the product's): it reports the
state a repair run reports while it waits for a review, with evidence stored
in the real evidence store, and ends when cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import WorkflowCancelled
from app.engine._registry import activity, workflow
from app.engine._runtime import Runtime

log = logging.getLogger("tests.dashboard")
SESSION_SECRET = "s" * 40
PATCH = """diff --git a/calc.py b/calc.py
index 1111111..2222222 100644
--- a/calc.py
+++ b/calc.py
@@ -1,3 +1,3 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
REPRO_LOG = "$ python -m pytest tests/test_calc.py\nFAILED tests/test_calc.py::test_add\n"


@activity("commands.run_reproduction")
async def reproduce(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    log.info("reproducing in %s", raw["repo"])
    return {"reproduced": True}


@activity("agent.propose_fix")
async def propose(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": "proposed", "input_tokens": 1200, "output_tokens": 340}


@workflow("repair")
async def waiting_repair(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {
        "run_id": ctx.run_id,
        "phase": "reproducing",
        "repo": request["repo"],
        "issue_number": request["issue_number"],
        "attempts": 1,
        "attempt_budget": 3,
        "evidence": request.get("evidence", []),
        "pull_number": 2,
        "contract": {"budgets": {"repair_attempts": 3, "total_seconds": 3600}},
    }
    ctx.set_query("status", lambda: dict(state))
    try:
        await ctx.activity(reproduce, {"repo": request["repo"]}, step="reproduce")
        state["phase"] = "repairing"
        await ctx.activity(propose, {"attempt": 1}, step="propose-1")
        state["phase"] = "awaiting-review"
        await ctx.wait_signal("review")
    except WorkflowCancelled:
        state["outcome"] = "cancelled"
        return state
    state["outcome"] = "merged"
    return state


ACTIVITIES = [reproduce, propose]


async def settle(runtime: Runtime, run_ids: list[str], timeout: float = 30.0) -> None:
    """Wait until every run waits for its review (its activities are done)."""
    deadline = time.monotonic() + timeout
    for run_id in run_ids:
        while runtime.query(run_id, "status").get("phase") != "awaiting-review":
            assert time.monotonic() < deadline, f"{run_id} did not reach awaiting-review"
            await asyncio.sleep(0.05)


@dataclass(frozen=True)
class People:
    owner: str = "octo"
    maintainer: str = "maya"
    reader: str = "rick"
    stranger: str = "eve"
