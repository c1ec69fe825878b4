"""Ambiguous failures go through reconcile; operation ids name one effect;
timeouts and deadlines end work that would otherwise hang."""

from __future__ import annotations

from typing import Any

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._errors import ActivityError, AmbiguousError, DeadlineExceeded, TransientError
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import Absent, Found, Registry, Unknown, activity, workflow

# An external "world" the activities act on, so the tests can see effects.
WORLD: dict[str, Any] = {}
FAST = RetryPolicy(initial_interval=0.01, max_attempts=4)


async def _reconcile(actx: ActivityContext, name: str) -> Any:
    verdict = WORLD.get("verdict")
    if verdict == "unknown":
        return Unknown("the remote cannot say whether the ticket exists")
    if name in WORLD.get("created", {}):
        return Found(WORLD["created"][name])
    return Absent()


@activity("create", retry=FAST, reconcile=_reconcile)
async def create(actx: ActivityContext, name: str) -> str:
    WORLD.setdefault("calls", []).append(actx.attempt)
    if WORLD.get("apply_then_lose") and actx.attempt == 1:
        WORLD.setdefault("created", {})[name] = f"id-{name}"
        raise AmbiguousError("connection dropped after the request was sent")
    if WORLD.get("lose_before_apply") and actx.attempt == 1:
        raise AmbiguousError("timed out before the request reached the server")
    WORLD.setdefault("created", {})[name] = f"id-{name}"
    return f"id-{name}"


@activity("echo")
async def echo(actx: ActivityContext, value: Any) -> Any:
    return value


@activity(
    "slow",
    retry=RetryPolicy(max_attempts=2, initial_interval=0.01),
    timeouts=Timeouts(start_to_close=0.2),
)
async def slow(actx: ActivityContext, _: Any) -> None:
    import asyncio

    await asyncio.sleep(5)


@activity("unheard", timeouts=Timeouts(schedule_to_start=0.2, start_to_close=5))
async def unheard(actx: ActivityContext, _: Any) -> None:
    return None


@workflow("create-one")
async def create_one(ctx: WorkflowContext, name: str) -> Any:
    return await ctx.activity(create, name, step="create")


@workflow("reuse-op")
async def reuse_op(ctx: WorkflowContext, same: bool) -> Any:
    first = await ctx.activity(echo, "a", step="echo")
    try:
        second = await ctx.activity(echo, "a" if same else "b", operation_id=f"{ctx.run_id}:echo")
    except ActivityError as exc:
        return {"error": exc.error_type}
    return [first, second]


@workflow("times-out")
async def times_out(ctx: WorkflowContext, _: Any) -> Any:
    try:
        await ctx.activity(slow, None, step="slow")
    except ActivityError as exc:
        return {"type": exc.error_type, "attempts": exc.attempts}
    return None


@workflow("deadline")
async def deadline(ctx: WorkflowContext, _: Any) -> Any:
    try:
        await ctx.sleep(3600)
    except DeadlineExceeded:
        return "reported the deadline"
    return "slept"


REGISTRY = Registry.of([create_one, reuse_op, times_out, deadline], [create, echo, slow, unheard])


def setup_function() -> None:
    WORLD.clear()


async def test_ambiguous_then_found_accepts_the_effect(make_runtime: Any) -> None:
    WORLD["apply_then_lose"] = True
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("create-one", "amb-found", "t1")
    run = await rt.wait_for("amb-found")
    assert (run.status, run.result) == ("completed", "id-t1")
    assert WORLD["calls"] == [1]  # reconcile found it: the mutation never ran twice
    outcomes = [a["outcome"] for a in rt.store.activity_attempts(run.run_id)]
    assert outcomes == ["failed:ambiguous", "reconciled-found"]


async def test_ambiguous_then_absent_retries(make_runtime: Any) -> None:
    WORLD["lose_before_apply"] = True
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("create-one", "amb-absent", "t2")
    run = await rt.wait_for("amb-absent")
    assert run.result == "id-t2"
    assert WORLD["calls"] == [1, 2]


async def test_ambiguous_then_unknown_parks_for_a_human(make_runtime: Any) -> None:
    WORLD["lose_before_apply"] = True
    WORLD["verdict"] = "unknown"
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("create-one", "amb-unknown", "t3")
    run = await rt.wait_for("amb-unknown")
    assert run.status == "needs-human"
    assert "cannot say" in run.error["reason"]
    assert WORLD["calls"] == [1]


async def test_resume_after_the_operator_settled_an_unknown_effect(make_runtime: Any) -> None:
    WORLD["lose_before_apply"] = True
    WORLD["verdict"] = "unknown"
    rt = await make_runtime(REGISTRY)
    started = await rt.start_workflow("create-one", "amb-resume", "t9")
    assert (await rt.wait_for("amb-resume")).status == "needs-human"
    # The operator looked: the ticket was never created. Reconcile can now tell.
    WORLD["verdict"] = None
    assert await rt.resume(started.run_id, "checked: no ticket t9 exists", by="ops")
    run = await rt.wait_for("amb-resume", statuses=("completed",))
    assert run.result == "id-t9"
    # Attempt 2 only reconciled (and parked); attempt 3 reconciled (absent), then created.
    assert WORLD["calls"] == [1, 3]
    resumed = [e.data for e in rt.store.load_events(run.run_id) if e.type == "run_resumed"]
    assert resumed == [
        {"reason": "checked: no ticket t9 exists", "from": "needs-human", "by": "ops"}
    ]


async def test_operation_id_reuse_with_other_parameters_is_an_error(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("reuse-op", "op-diff", False)
    await rt.start_workflow("reuse-op", "op-same", True)
    assert (await rt.wait_for("op-diff")).result == {"error": "OperationIdConflict"}
    # The same operation with the same parameters is the same effect: its result.
    assert (await rt.wait_for("op-same")).result == ["a", "a"]


async def test_start_to_close_timeout_retries_then_fails(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("times-out", "stc")
    run = await rt.wait_for("stc", timeout=15)
    assert run.result == {"type": "StartToCloseTimeout", "attempts": 2}


async def test_workflow_deadline_is_delivered_to_the_code(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start_workflow("deadline", "dl", deadline_seconds=0.2)
    run = await rt.wait_for("dl", timeout=10)
    assert (run.status, run.result) == ("completed", "reported the deadline")


class RefusedInput(Exception):
    pass


@activity(
    "validate",
    retry=RetryPolicy(
        initial_interval=0.01, max_attempts=5, non_retryable_error_types=("RefusedInput",)
    ),
)
async def validate(actx: ActivityContext, _: Any) -> None:
    WORLD.setdefault("validations", []).append(actx.attempt)
    raise RefusedInput("input is not acceptable")


@workflow("validating")
async def validating(ctx: WorkflowContext, _: Any) -> Any:
    try:
        await ctx.activity(validate, None, step="validate")
    except ActivityError as exc:
        return {"type": exc.error_type, "attempts": exc.attempts}
    return None


async def test_non_retryable_error_types_fail_at_once(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([validating], [validate]))
    await rt.start_workflow("validating", "nonretry")
    run = await rt.wait_for("nonretry")
    assert run.result == {"type": "RefusedInput", "attempts": 1}
    assert WORLD["validations"] == [1]


@activity("rate-limited", retry=RetryPolicy(initial_interval=30.0, max_attempts=3))
async def rate_limited(actx: ActivityContext, _: Any) -> int:
    WORLD.setdefault("rate_attempts", []).append(actx.attempt)
    if actx.attempt == 1:
        # The remote says when to come back; that beats the 30 s backoff.
        raise TransientError("secondary rate limit", next_retry_delay=0.05)
    return actx.attempt


@workflow("rate-limited-flow")
async def rate_limited_flow(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.activity(rate_limited, None, step="call")


async def test_next_retry_delay_overrides_backoff(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([rate_limited_flow], [rate_limited]))
    await rt.start_workflow("rate-limited-flow", "rl")
    run = await rt.wait_for("rl", timeout=10)  # the 30 s backoff would blow this
    assert run.result == 2


@workflow("never-picked")
async def never_picked(ctx: WorkflowContext, _: Any) -> Any:
    try:
        await ctx.activity(unheard, None, step="unheard")
    except ActivityError as exc:
        return exc.error_type
    return "ran"


async def test_schedule_to_start_timeout_fails_an_activity_nobody_picks_up(
    make_runtime: Any,
) -> None:
    # This worker has the workflow but not the activity: it is never started.
    rt = await make_runtime(Registry.of([never_picked], []))
    await rt.start_workflow("never-picked", "s2s")
    run = await rt.wait_for("s2s", timeout=10)
    assert run.result == "ScheduleToStartTimeout"
