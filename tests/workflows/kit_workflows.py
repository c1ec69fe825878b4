"""Small workflows that exercise the kit itself (timers, signals, retries)."""

from __future__ import annotations

from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityError
from app.engine._policy import RetryPolicy
from app.engine._registry import Registry, activity, workflow


@activity("kit.greet")
async def greet(actx: ActivityContext, name: str) -> str:
    raise AssertionError("the real activity never runs under the kit")


@activity("kit.flaky", retry=RetryPolicy(initial_interval=60, max_interval=600, max_attempts=3))
async def flaky(actx: ActivityContext, _: Any) -> str:
    raise AssertionError("the real activity never runs under the kit")


@workflow("kit-reminder")
async def reminder(ctx: WorkflowContext, hours: float) -> dict[str, Any]:
    ctx.set_query("status", lambda: {"phase": "waiting"})
    approved = await ctx.wait_signal("approve", timeout=hours * 3600)
    if approved is None:
        await ctx.sleep(60)
        return {"outcome": "expired", "at": ctx.now().isoformat()}
    greeting = await ctx.activity(greet, approved.payload, step="greet")
    return {"outcome": "approved", "greeting": greeting}


@workflow("kit-retrying")
async def retrying(ctx: WorkflowContext, _: Any) -> dict[str, Any]:
    try:
        return {"value": await ctx.activity(flaky, None, step="flaky")}
    except ActivityError as exc:
        return {"failed": exc.failure_class, "attempts": exc.attempts}


REGISTRY = Registry.of([reminder, retrying], [greet, flaky])
