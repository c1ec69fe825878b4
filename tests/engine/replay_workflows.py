"""Workflows whose recorded histories live in tests/histories/.

``greet`` is the current code. ``greet_changed_unsafely`` and
``greet_changed_with_patch`` are two ways of making the same change (a new
step before the greeting) and show what the replay harness catches.
"""

from __future__ import annotations

from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._registry import Registry, WorkflowDefn, activity, workflow


@activity("lookup")
async def lookup(actx: ActivityContext, name: str) -> str:
    return name.title()


@activity("audit")
async def audit(actx: ActivityContext, name: str) -> str:
    return f"audited {name}"


@activity("say")
async def say(actx: ActivityContext, text: str) -> str:
    return text


async def _greet(ctx: WorkflowContext, name: str) -> Any:
    proper = await ctx.activity(lookup, name, step="lookup")
    approval = await ctx.wait_signal("approve", timeout=60)
    await ctx.sleep(0.01)
    said = await ctx.activity(say, f"hello {proper}", step="say")
    return {"said": said, "approved": approval is not None}


async def _greet_changed_unsafely(ctx: WorkflowContext, name: str) -> Any:
    await ctx.activity(audit, name, step="audit")  # new step, not guarded
    return await _greet(ctx, name)


async def _greet_changed_with_patch(ctx: WorkflowContext, name: str) -> Any:
    if ctx.patched("audit-before-greeting"):
        await ctx.activity(audit, name, step="audit")
    return await _greet(ctx, name)


greet = workflow("greet", version=1)(_greet_changed_with_patch)
greet_original = WorkflowDefn("greet", 1, _greet)
greet_changed_unsafely = WorkflowDefn("greet", 1, _greet_changed_unsafely)

REGISTRY = Registry.of([greet], [lookup, audit, say])
