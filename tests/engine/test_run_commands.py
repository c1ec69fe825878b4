"""``ctx.start_run``, ``ctx.cancel_run``, ``ctx.describe_run``: a workflow acts
on another run by workflow id through recorded commands, answered in the
transaction that carries them out, so no activity calls the runtime
(SQLite and PostgreSQL; the SIGKILL test is in test_crash_run_commands.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.engine._context import WorkflowContext
from app.engine._history import export_history, replay_recorded
from app.engine._registry import Registry
from app.engine._run_commands import RunDescription
from app.engine._runtime import Runtime
from app.engine._typed import typed_workflow
from tests.waiting import history_has, wait_until


class Target(BaseModel):
    broken_query: bool = False


class Done(BaseModel):
    finished: bool


@typed_workflow("target")
async def target(ctx: WorkflowContext, input: Target) -> Done:
    def status() -> dict[str, Any]:
        if input.broken_query:
            raise RuntimeError("this query cannot answer")
        return {"phase": "waiting"}

    ctx.set_query("status", status)
    await ctx.wait_signal("finish")
    return Done(finished=True)


class Key(BaseModel):
    target_id: str


class Starts(BaseModel):
    runs: list[str]
    created: list[bool]


@typed_workflow("starter")
async def starter(ctx: WorkflowContext, input: Key) -> Starts:
    """Starts the target, waits for ``go``, asks to start it again."""
    first = await ctx.start_run(target, Target(), id=input.target_id)
    await ctx.wait_signal("go")
    second = await ctx.start_run(target, Target(), id=input.target_id)
    return Starts(runs=[first.run_id, second.run_id], created=[first.created, second.created])


@typed_workflow("starter")
async def starter_renamed(ctx: WorkflowContext, input: Key) -> Starts:
    """The same workflow after an incompatible change: another id."""
    first = await ctx.start_run(target, Target(), id=f"x-{input.target_id}")
    await ctx.wait_signal("go")
    return Starts(runs=[first.run_id], created=[first.created])


class Cancelled(BaseModel):
    cancelled: bool


@typed_workflow("canceller")
async def canceller(ctx: WorkflowContext, input: Key) -> Cancelled:
    answer = await ctx.cancel_run(input.target_id, reason="asked by a test")
    return Cancelled(cancelled=answer.cancelled)


@typed_workflow("describer")
async def describer(ctx: WorkflowContext, input: Key) -> RunDescription:
    return await ctx.describe_run(input.target_id, query="status")


REGISTRY = Registry.of([target, starter, canceller, describer])


def _events(rt: Runtime, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.load_events(run_id) if e.type == type_]


def _runs_of(rt: Runtime, workflow_id: str) -> list[str]:
    return [r.run_id for r in rt.store.list_runs() if r.workflow_id == workflow_id]


async def _finished(rt: Runtime, key: str, input: BaseModel, workflow: Any) -> Any:
    await rt.start(workflow, input, id=key)
    run = await rt.wait_for(key)
    assert run.status == "completed", run.error
    return run


async def test_a_run_under_an_open_id_is_the_answer_and_an_ended_one_is_followed(
    make_runtime: Any,
) -> None:
    rt = await make_runtime(REGISTRY)
    started = await rt.start(starter, Key(target_id="t-1"), id="s-1")
    await wait_until("the start answered", history_has(rt, started.run_id, "run_command_answered"))
    [first] = _runs_of(rt, "t-1")
    # ``go`` while the target is open: the second start finds it.
    await rt.signal("s-1", "go", {}, dedupe_key="go-1")
    run = await rt.wait_for("s-1")
    assert run.result == {"runs": [first, first], "created": [True, False]}

    await rt.signal("t-1", "finish", {}, dedupe_key="finish-1")
    await rt.wait_for("t-1")
    # Another run's start after the target ended starts a new one under its id.
    again = await _finished(rt, "s-2", Key(target_id="t-1"), canceller)
    assert again.result == {"cancelled": False}  # nothing open to cancel
    restarted = await rt.start(starter, Key(target_id="t-1"), id="s-3")
    await wait_until(
        "the start answered", history_has(rt, restarted.run_id, "run_command_answered")
    )
    assert len(_runs_of(rt, "t-1")) == 2
    assert (await rt.wait_for("t-1", statuses=("running",))).run_id != first


async def test_a_start_is_carried_out_once_per_command_and_replays(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    started = await rt.start(starter, Key(target_id="t-4"), id="s-4")
    await wait_until("the start answered", history_has(rt, started.run_id, "run_command_answered"))
    await rt.signal("t-4", "finish", {}, dedupe_key="finish-4")
    await rt.wait_for("t-4")
    # The next task replays the first start (its answer is recorded), then
    # issues the second, which follows the ended run with a new one.
    await rt.signal("s-4", "go", {}, dedupe_key="go-4")
    run = await rt.wait_for("s-4")
    assert run.result is not None and run.result["created"] == [True, True]
    assert len(_runs_of(rt, "t-4")) == 2
    requested = _events(rt, started.run_id, "run_start_requested")
    answered = _events(rt, started.run_id, "run_command_answered")
    assert [r["cmd"] for r in requested] == [a["cmd"] for a in answered]
    assert len(requested) == 2

    history = export_history(rt.store, started.run_id)
    same = replay_recorded(history, Registry.of([starter, target]))
    assert same.ok and same.new_commands == [], same.problem
    changed = replay_recorded(history, Registry.of([starter_renamed, target]))
    assert not changed.ok and changed.problem and "x-t-4" in changed.problem


async def test_cancel_asks_the_open_run_to_cancel_with_the_reason(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    target_run = await rt.start(target, Target(), id="t-5")
    done = await _finished(rt, "c-5", Key(target_id="t-5"), canceller)
    assert done.result == {"cancelled": True}
    cancelled = await rt.wait_for("t-5")
    assert cancelled.status == "cancelled"
    [asked] = _events(rt, target_run.run_id, "cancel_requested")
    assert asked == {"reason": "asked by a test", "by": f"run {done.run_id}"}


async def test_describe_answers_status_query_result_and_error(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    none = await _finished(rt, "d-0", Key(target_id="t-6"), describer)
    assert none.result["exists"] is False

    target_run = await rt.start(target, Target(), id="t-6")
    open_ = await _finished(rt, "d-1", Key(target_id="t-6"), describer)
    assert open_.result == {
        "exists": True,
        "run_id": target_run.run_id,
        "status": "running",
        "query": {"phase": "waiting"},
        "result": None,
        "error": None,
    }

    await rt.signal("t-6", "finish", {}, dedupe_key="finish-6")
    await rt.wait_for("t-6")
    closed = await _finished(rt, "d-2", Key(target_id="t-6"), describer)
    # A closed run answers no query: its result says how it ended.
    assert closed.result["status"] == "completed"
    assert closed.result["query"] is None
    assert closed.result["result"] == {"finished": True}


async def test_a_query_that_fails_is_described_as_none(make_runtime: Any) -> None:
    rt = await make_runtime(REGISTRY)
    await rt.start(target, Target(broken_query=True), id="t-7")
    described = await _finished(rt, "d-7", Key(target_id="t-7"), describer)
    assert (described.result["status"], described.result["query"]) == ("running", None)
