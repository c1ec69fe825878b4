"""The typed engine API: activities and workflows declared from type hints,
derived step ids, typed signals, activity methods on an instance, and
workflow-declared cancel phases and resume signal (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._history import export_history, replay_recorded
from app.engine._registry import Registry, workflow
from app.engine._runtime import Runtime
from app.engine._typed import InputRejected, TypedActivity, typed_activity, typed_workflow
from tests.engine.typed_example import (
    APPROVAL,
    Approval,
    GreetInput,
    Shouter,
    greet,
    registry,
)

ROOT = Path(__file__).resolve().parents[2]


def _events(rt: Runtime, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.load_events(run_id) if e.type == type_]


def _task_inputs(rt: Runtime, run_id: str) -> dict[str, Any]:
    from sqlalchemy import select

    from app.engine._store.schema import tasks

    with rt.engine.connect() as conn:
        rows = conn.execute(
            select(tasks.c.operation_id, tasks.c.input).where(tasks.c.run_id == run_id)
        ).all()
    return {row.operation_id.split(":", 1)[1]: row.input for row in rows}


async def _waiting_for_signal(rt: Runtime, run_id: str) -> None:
    """The run committed its wait (a timer for the signal's timeout)."""
    await rt.wait_for(run_id, statuses=("running",))
    for _ in range(2000):
        if _events(rt, run_id, "timer_started"):
            return
        await rt.wait_for(run_id, statuses=("running",), timeout=0.01)
    raise AssertionError("the run never waited for its signal")


async def test_typed_calls_validate_dump_and_return_models(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    started = await rt.start(greet, GreetInput(name="ada"), id="typed-1")
    await _waiting_for_signal(rt, started.run_id)
    assert await rt.send("typed-1", APPROVAL, Approval(by="bob", approve=True), dedupe_key="r1")
    run = await rt.wait_for("typed-1")
    assert run.status == "completed", run.error
    assert run.result == {
        "texts": ["hello ada", "hello named", "HELLO AGAIN!!!"],
        "approved_by": "bob",
    }
    inputs = _task_inputs(rt, started.run_id)
    # Derived step ids: activity name + per-name counter; step= is kept as given.
    assert sorted(inputs) == ["by-hand", "compose-1", "compose-2", "shout-1"]
    # Recorded as JSON; a late field at its default is left out, set it is kept.
    assert inputs["compose-1"] == {"name": "ada"}
    assert inputs["compose-2"] == {"name": "again", "excited": True}
    # The workflow's own input is recorded the same way.
    assert _events(rt, started.run_id, "workflow_started")[0]["input"] == {"name": "ada"}


async def test_derived_step_ids_replay_from_the_exported_history(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    started = await rt.start(greet, GreetInput(name="ada"), id="typed-replay")
    await _waiting_for_signal(rt, started.run_id)
    await rt.send("typed-replay", APPROVAL, Approval(by="x", approve=False), dedupe_key="r")
    await rt.wait_for("typed-replay")
    history = export_history(rt.store, started.run_id)
    report = replay_recorded(history, registry())
    assert report.ok and report.new_commands == [], report.problem


class Count(BaseModel):
    n: int


@typed_activity()
async def add_one(actx: ActivityContext, input: Count) -> Count:
    return Count(n=input.n + 1)


@typed_workflow("bad-input")
async def bad_input(ctx: WorkflowContext, input: Count) -> Count:
    return await ctx.call(add_one, {"n": "not a number"})  # type: ignore[arg-type]


async def test_an_invalid_activity_input_fails_the_call_not_the_worker(
    make_runtime: Any,
) -> None:
    rt = await make_runtime(Registry.of([bad_input], [add_one]))
    started = await rt.start(bad_input, Count(n=1), id="bad-input")
    run = await rt.wait_for("bad-input")
    assert run.status == "failed"
    assert run.error["type"] == "InputRejected"
    assert run.error["message"].startswith("activity add_one input: not a valid Count (n:")
    assert _events(rt, started.run_id, "activity_scheduled") == []


@workflow("untyped-caller")
async def untyped_caller(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.activity(add_one, {"n": "not a number"}, step="add")


async def test_a_malformed_untyped_payload_fails_the_typed_activity_at_once(
    make_runtime: Any,
) -> None:
    """A payload an untyped caller sends is checked by the activity itself, and
    a malformed one is permanent: one attempt, no retries."""
    rt = await make_runtime(Registry.of([untyped_caller], [add_one]))
    started = await rt.start_workflow("untyped-caller", "untyped-caller", None)
    run = await rt.wait_for("untyped-caller")
    assert run.status == "failed"
    [attempt] = rt.store.activity_attempts(started.run_id)
    assert attempt["outcome"].startswith("failed:permanent")
    assert "activity add_one input: not a valid Count" in attempt["error"]["message"]


async def test_an_invalid_workflow_input_is_refused_before_the_run_starts(
    make_runtime: Any,
) -> None:
    rt = await make_runtime(Registry.of([bad_input], [add_one]))
    with pytest.raises(InputRejected, match=r"^workflow bad-input input: not a valid Count"):
        await rt.start(bad_input, {"n": []}, id="never")  # type: ignore[arg-type]
    assert rt.store.find_run("never") is None


async def test_a_malformed_signal_never_reaches_the_workflow(make_runtime: Any) -> None:
    rt = await make_runtime(registry())
    started = await rt.start(greet, GreetInput(name="ada"), id="typed-sig")
    await _waiting_for_signal(rt, started.run_id)
    with pytest.raises(InputRejected, match=r"^signal 'approval' payload: not a valid Approval"):
        await rt.send("typed-sig", APPROVAL, {"by": "mallory"}, dedupe_key="bad-1")  # type: ignore[arg-type]
    # The untyped path checks the signals the workflow declares too.
    with pytest.raises(InputRejected, match="approve: Field required"):
        await rt.signal("typed-sig", "approval", {"by": "mallory"}, dedupe_key="bad-2")
    assert _events(rt, started.run_id, "signal_received") == []
    assert await rt.signal("typed-sig", "approval", {"by": "eve", "approve": 1}, dedupe_key="ok")
    run = await rt.wait_for("typed-sig")
    assert run.result["approved_by"] == "eve"
    assert [s["payload"] for s in _events(rt, started.run_id, "signal_received")] == [
        {"by": "eve", "approve": True}
    ]


class Counts(BaseModel):
    ns: list[int]


@typed_workflow("fans-out")
async def fans_out(ctx: WorkflowContext, input: Count) -> Counts:
    futures = [ctx.schedule(add_one, Count(n=input.n + i)) for i in range(3)]
    results: list[Count] = await ctx.gather(*futures)
    # A typed future is what cancel_activity takes too (here: already ended).
    await ctx.cancel_activity(futures[0])
    return Counts(ns=[r.n for r in results])


async def test_typed_futures_gather_and_cancel(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([fans_out], [add_one]))
    started = await rt.start(fans_out, Count(n=10), id="fans-out")
    run = await rt.wait_for("fans-out")
    assert (run.status, run.result) == ("completed", {"ns": [11, 12, 13]}), run.error
    assert sorted(_task_inputs(rt, started.run_id)) == ["add_one-1", "add_one-2", "add_one-3"]


@typed_workflow("undeclared")
async def undeclared(ctx: WorkflowContext, input: Count) -> Count:
    """Waits for APPROVAL without declaring it: only the typed send checks it."""
    approval = await ctx.wait_for(APPROVAL)
    return Count(n=len(approval.by))


async def test_a_typed_send_validates_what_no_workflow_declares(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([undeclared]))
    started = await rt.start(undeclared, Count(n=0), id="undeclared")
    await rt.wait_for("undeclared", statuses=("running",))
    with pytest.raises(InputRejected, match="approve: Field required"):
        await rt.send("undeclared", APPROVAL, {"by": "mallory"}, dedupe_key="bad")  # type: ignore[arg-type]
    assert await rt.send("undeclared", APPROVAL, Approval(by="ann", approve=True), dedupe_key="ok")
    assert (await rt.wait_for("undeclared")).result == {"n": 3}
    assert [s["dedupe_key"] for s in _events(rt, started.run_id, "signal_received")] == ["ok"]


def test_method_activities_must_be_registered_through_their_instance() -> None:
    with pytest.raises(TypeError, match="use register_activities"):
        Registry.of([], [Shouter.shout])
    with pytest.raises(TypeError, match="declares no activity methods"):
        Registry().register_activities(object())
    built = Registry()
    assert built.register_activities(Shouter("?")) == ["shout"]
    bound = built.activities["shout"]
    assert isinstance(bound, TypedActivity) and bound.bound


def test_a_typed_workflows_own_source_is_checked_for_determinism() -> None:
    @typed_workflow("reads-the-clock")
    async def reads_the_clock(ctx: WorkflowContext, input: Count) -> Count:
        return Count(n=int(time.time()))

    with pytest.raises(Exception, match=r"time\.time"):
        Registry.of([reads_the_clock])


def test_activity_names_make_marker_safe_step_ids() -> None:
    with pytest.raises(ValueError, match="becomes part of operation ids and GitHub markers"):

        @typed_activity("github:create pr")
        async def spaced(actx: ActivityContext, input: Count) -> Count:
            return input


def test_declarations_need_model_hints() -> None:
    with pytest.raises(TypeError, match="its input must be hinted as a pydantic model"):

        @typed_activity()
        async def untyped(actx: ActivityContext, input: dict[str, int]) -> Count:
            return Count(n=0)


@typed_workflow("archiver", cancel_phases=("archiving",), resume_signal="proceed")
async def archiver(ctx: WorkflowContext, input: Count) -> Count:
    try:
        resumed = await ctx.wait_for_operator("check the archive")
        return Count(n=len(resumed.payload["reason"]))
    finally:
        if ctx.cancel_requested:
            ctx.enter_cancel_phase("archiving")


@typed_workflow("borrows-repair-phases", cancel_phases=("archiving",))
async def borrows(ctx: WorkflowContext, input: Count) -> Count:
    ctx.enter_cancel_phase("preserving-evidence")
    return input


@workflow("legacy-phases")
async def legacy(ctx: WorkflowContext, _: Any) -> str:
    ctx.enter_cancel_phase("preserving-evidence")
    return "ok"


async def test_cancel_phases_are_the_workflows_own(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([archiver, borrows, legacy]))
    await rt.start(borrows, Count(n=1), id="borrows")
    run = await rt.wait_for("borrows")
    assert run.status == "failed"
    assert "unknown cancel phase 'preserving-evidence'" in run.error["message"]
    # Workflows declared the old way keep the phases they had.
    await rt.start_workflow("legacy-phases", "legacy")
    assert (await rt.wait_for("legacy")).status == "completed"

    started = await rt.start(archiver, Count(n=0), id="archiver")
    await rt.wait_for("archiver", statuses=("needs-human",))
    assert await rt.cancel(started.run_id, "no longer needed")
    run = await rt.wait_for("archiver")
    assert run.status == "cancelled" and run.cancel_phase == "archiving"


async def test_a_workflow_declares_the_signal_an_operator_resume_sends(
    make_runtime: Any,
) -> None:
    rt = await make_runtime(Registry.of([archiver]))
    started = await rt.start(archiver, Count(n=0), id="resumes")
    parked = await rt.wait_for("resumes", statuses=("needs-human",))
    assert parked.error["resume_signal"] == "proceed"
    assert await rt.resume(started.run_id, "looked", by="dave")
    run = await rt.wait_for("resumes")
    assert (run.status, run.result) == ("completed", {"n": len("looked")})
    assert [s["name"] for s in _events(rt, started.run_id, "signal_received")] == ["proceed"]


def test_mypy_infers_the_typed_results(tmp_path: Path) -> None:
    """``assert_type`` in the example holds, and a wrong input is a type error
    (an unused ``type: ignore`` would fail this run)."""
    probe = ROOT / "tests" / "engine" / "typed_example.py"
    wrong = (
        "async def wrong(ctx: WorkflowContext) -> None:\n"
        '    await ctx.call(compose, Approval(by="x", approve=True))  # type: ignore[misc]\n'
    )
    checked = probe.read_text() + "\n\n" + wrong
    target = tmp_path / "typed_probe.py"
    target.write_text(checked)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--warn-unused-ignores", str(target)],
        cwd=ROOT,  # its pyproject (the pydantic plugin) and ``app`` on the path
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
