"""The workflow API end to end on a real database, in-process dispatch."""

from __future__ import annotations

from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityError, PermanentError, TransientError
from app.engine._policy import RetryPolicy
from app.engine._registry import Registry, activity, workflow


@activity("add")
async def add(actx: ActivityContext, args: dict[str, int]) -> int:
    return args["a"] + args["b"]


@activity("flaky", retry=RetryPolicy(initial_interval=0.01, max_attempts=3))
async def flaky(actx: ActivityContext, fail_times: int) -> int:
    if actx.attempt <= fail_times:
        raise TransientError(f"attempt {actx.attempt} failed")
    return actx.attempt


@activity("broken", retry=RetryPolicy(initial_interval=0.01, max_attempts=5))
async def broken(actx: ActivityContext, _: Any) -> None:
    raise PermanentError("this never works")


@workflow("sequence")
async def sequence(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total = await ctx.activity(add, {"a": total, "b": i}, step=f"add-{i}")
    return total


@workflow("parallel")
async def parallel(ctx: WorkflowContext, _: Any) -> list[int]:
    results: list[int] = await ctx.gather(
        ctx.activity(add, {"a": 1, "b": 1}, step="x"),
        ctx.activity(add, {"a": 2, "b": 2}, step="y"),
    )
    return results


@workflow("retrying")
async def retrying(ctx: WorkflowContext, fail_times: int) -> Any:
    try:
        return await ctx.activity(flaky, fail_times, step="flaky")
    except ActivityError as exc:
        return {"failed": exc.failure_class, "attempts": exc.attempts}


@workflow("permanent")
async def permanent(ctx: WorkflowContext, _: Any) -> Any:
    try:
        await ctx.activity(broken, None, step="broken")
    except ActivityError as exc:
        return {"class": exc.failure_class, "attempts": exc.attempts, "type": exc.error_type}
    return None


@workflow("waiter")
async def waiter(ctx: WorkflowContext, _: Any) -> Any:
    ctx.set_query("phase", lambda: "waiting")
    got = await ctx.wait_signal("approve", timeout=30)
    await ctx.sleep(0.05)
    return {"payload": got.payload if got else None, "at": ctx.now().isoformat() != ""}


REGISTRY = Registry.of(
    [sequence, parallel, retrying, permanent, waiter],
    [
        add,
        flaky,
        broken,
    ],
)


async def test_sequence_of_activities(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("sequence", "seq-1", 5)
    run = await rt.wait_for("seq-1")
    assert (run.status, run.result) == ("completed", 10)


async def test_gather_runs_in_parallel(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("parallel", "par-1")
    run = await rt.wait_for("par-1")
    assert run.result == [2, 4]


async def test_transient_failures_are_retried(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("retrying", "retry-ok", 2)
    await rt.start_workflow("retrying", "retry-exhausted", 5)
    assert (await rt.wait_for("retry-ok")).result == 3
    assert (await rt.wait_for("retry-exhausted")).result == {"failed": "transient", "attempts": 3}


async def test_permanent_failure_is_not_retried(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("permanent", "perm-1")
    run = await rt.wait_for("perm-1")
    assert run.result == {"class": "permanent", "attempts": 1, "type": "PermanentError"}


async def test_signal_with_dedupe_and_query(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("waiter", "wait-1")
    assert await rt.signal("wait-1", "approve", {"by": "alice"}, dedupe_key="review-1")
    assert not await rt.signal("wait-1", "approve", {"by": "alice"}, dedupe_key="review-1")
    run = await rt.wait_for("wait-1")
    assert run.result == {"payload": {"by": "alice"}, "at": True}
    assert rt.query("wait-1", "phase") == "waiting"


async def test_start_is_idempotent_per_workflow_id(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    first = await rt.start_workflow("waiter", "once")
    second = await rt.start_workflow("waiter", "once")
    assert first.created and not second.created and first.run_id == second.run_id


@workflow("any-signal")
async def any_signal(ctx: WorkflowContext, _: Any) -> list[Any]:
    got = []
    for _ in range(3):
        signal = await ctx.wait_signal(["a", "b"], timeout=30)
        got.append(signal.name if signal else None)
    late = await ctx.wait_signal("c", timeout=0.05)
    got.append(late.name if late else None)
    return got


@workflow("returns-an-object")
async def returns_an_object(ctx: WorkflowContext, _: Any) -> Any:
    return object()


async def test_a_result_that_is_not_json_fails_the_run_clearly(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([returns_an_object], []))
    await rt.start_workflow("returns-an-object", "obj")
    run = await rt.wait_for("obj")
    assert run.status == "failed"
    assert "not JSON-serializable" in run.error["message"]


async def test_wait_for_any_of_several_signals_in_arrival_order(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([any_signal], []))
    await rt.start_workflow("any-signal", "any-1")
    for key, name in (("1", "b"), ("2", "c"), ("3", "a"), ("4", "b")):
        await rt.signal("any-1", name, None, dedupe_key=key)
    run = await rt.wait_for("any-1")
    # "c" arrived second but nobody waited for it until the end: it stays buffered.
    assert run.result[:3] == ["b", "a", "b"]
    assert run.result[3] == "c"


@workflow("ids")
async def ids(ctx: WorkflowContext, _: Any) -> list[str]:
    made = [ctx.uuid(), ctx.uuid()]
    ctx.set_query("ids", lambda: made)
    await ctx.sleep(0.01)
    return made


async def test_uuid_is_the_same_on_every_replay(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([ids], []))
    await rt.start_workflow("ids", "ids-1")
    run = await rt.wait_for("ids-1")
    assert len(set(run.result)) == 2
    assert rt.query("ids-1", "ids") == run.result  # a fresh replay makes the same ids
