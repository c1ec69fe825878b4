"""Runs keep their version; changed code is caught; continue-as-new bounds history;
workflow code that reads the world directly is refused at registration."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._determinism import check_module_source
from app.engine._errors import DeterminismViolation
from app.engine._registry import Registry, WorkflowDefn, activity, workflow
from tests.waiting import history_has, wait_until


@activity("noop")
async def noop(actx: ActivityContext, value: Any) -> Any:
    return value


async def _v1(ctx: WorkflowContext, _: Any) -> str:
    await ctx.activity(noop, 1, step="one")
    await ctx.wait_signal("go")
    await ctx.activity(noop, 2, step="two")
    return "v1 done"


async def _v1_edited(ctx: WorkflowContext, _: Any) -> str:
    await ctx.activity(noop, "changed", step="one")  # different input: not the same step
    await ctx.wait_signal("go")
    return "edited"


async def test_changed_code_parks_the_run_with_a_diff(make_runtime: Any) -> None:
    original = WorkflowDefn("flow", 1, _v1)
    rt = await make_runtime(Registry.of([original], [noop]))
    await rt.start_workflow("flow", "nd-1")
    # The old code ran its first step and waits for the signal.
    await wait_until("step one recorded", history_has(rt, "nd-1", "activity_completed"))
    await rt.stop()  # the worker with the old code goes away (a deploy)

    edited = WorkflowDefn("flow", 1, _v1_edited)
    rt2 = await make_runtime(Registry.of([edited], [noop]))
    await rt2.signal("nd-1", "go", None, dedupe_key="go-1")
    run = await rt2.wait_for("nd-1")
    assert run.status == "blocked-nondeterministic"
    message = run.error["message"]
    assert "history has:" in message and "code issued:" in message
    assert "activity_scheduled" in message


async def test_run_keeps_its_version_and_workers_take_only_their_versions(
    make_runtime: Any,
) -> None:
    async def _v2(ctx: WorkflowContext, _: Any) -> str:
        return "v2"

    v1, v2 = WorkflowDefn("flow", 1, _v1), WorkflowDefn("flow", 2, _v2)
    only_v2 = await make_runtime(Registry.of([v2], [noop]))
    started = await only_v2.start_workflow("flow", "pinned", version=1)
    # The run's job reached the worker, which left it alone.
    await wait_until("the job taken", lambda: only_v2.dispatcher.jobs_run >= 1)
    assert only_v2.store.load_run(started.run_id).history_length == 1  # untouched
    both = await make_runtime(Registry.of([v1, v2], [noop]))
    await both.signal("pinned", "go", None, dedupe_key="go")
    run = await both.wait_for("pinned")
    assert run.result == "v1 done"
    new = await both.start_workflow("flow", "latest")
    assert (await both.wait_for("latest")).result == "v2"
    assert both.store.load_run(new.run_id).workflow_version == 2


@workflow("counter")
async def counter(ctx: WorkflowContext, state: dict[str, int]) -> Any:
    total, left = state["total"], state["left"]
    while left > 0:
        total += await ctx.activity(noop, 1, step=f"add-{left}")
        left -= 1
        if ctx.should_continue_as_new and left > 0:
            raise ctx.continue_as_new({"total": total, "left": left})
    return total


async def test_continue_as_new_bounds_history(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([counter], [noop]), max_history_events=8)
    await rt.start_workflow("counter", "cn", {"total": 0, "left": 10})
    run = await rt.wait_for("cn", statuses=("completed",), timeout=20)
    assert run.result == 10
    assert run.run_id != "cn/1" and run.continued_from is not None
    chain, key = [], run.run_id
    while key:
        row = rt.store.load_run(key)
        chain.append(row)
        key = row.continued_from
    assert all(r.history_length <= 8 + 3 for r in chain)
    assert [r.status for r in chain[1:]] == ["continued-as-new"] * (len(chain) - 1)


def _reads_clock(ctx: WorkflowContext, _: Any) -> Any:
    return time.time()


async def _awaits_asyncio(ctx: WorkflowContext, _: Any) -> Any:
    await asyncio.sleep(1)


def test_workflow_reading_the_clock_is_refused_at_registration() -> None:
    with pytest.raises(DeterminismViolation, match=r"time\.time"):
        Registry.of([WorkflowDefn("bad", 1, _reads_clock)])  # type: ignore[arg-type]
    with pytest.raises(DeterminismViolation, match=r"asyncio\.sleep"):
        Registry.of([WorkflowDefn("bad", 1, _awaits_asyncio)])


def test_product_workflows_pass_the_determinism_check() -> None:
    from app.contracts import ids, requests
    from app.main.catalog import CONTRACT_MODULES, build_registry
    from app.workflows import (
        calls,
        example,
        repair,
        repair_base,
        repair_review,
        repair_v1,
        repair_work,
        report,
        report_v1,
        slash_command,
        slash_command_v1,
        state,
    )

    assert build_registry().workflow_keys()  # building it checked each workflow function
    for module in (
        calls,
        requests,
        *CONTRACT_MODULES,  # workflows call their helpers (body_sha256, named)
        example,
        ids,
        repair,
        repair_base,
        repair_review,
        repair_v1,
        repair_work,
        report,
        report_v1,
        slash_command,
        slash_command_v1,
        state,
    ):
        check_module_source(module)  # and their helpers and classes, whole


async def test_awaiting_a_foreign_awaitable_fails_the_run(make_runtime: Any) -> None:
    rt = await make_runtime(
        Registry.of([WorkflowDefn("foreign", 1, _awaits_asyncio)], [], check_determinism=False)
    )
    await rt.start_workflow("foreign", "f-1")
    run = await rt.wait_for("f-1")
    assert run.status == "failed"
    assert "only ctx futures may be awaited" in run.error["message"]
