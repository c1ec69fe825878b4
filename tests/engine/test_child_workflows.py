"""``ctx.start_workflow``: starting another workflow is a recorded command,
replay-checked and idempotent by id, so no activity calls the runtime
(SQLite and PostgreSQL; the SIGKILL test is in test_crash_child_start.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.engine._context import WorkflowContext
from app.engine._history import export_history, replay_recorded
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.engine._typed import typed_workflow


class Child(BaseModel):
    n: int


class Parent(BaseModel):
    child_ids: list[str]


class Started(BaseModel):
    runs: list[str]


@typed_workflow("child")
async def child(ctx: WorkflowContext, input: Child) -> Child:
    return Child(n=input.n * 2)


@typed_workflow("parent")
async def parent(ctx: WorkflowContext, input: Parent) -> Started:
    runs = [await ctx.start_workflow(child, Child(n=3), id=cid) for cid in input.child_ids]
    return Started(runs=runs)


@typed_workflow("parent")
async def parent_renamed(ctx: WorkflowContext, input: Parent) -> Started:
    """The same workflow after an incompatible change: another child id."""
    runs = [await ctx.start_workflow(child, Child(n=3), id=f"x-{c}") for c in input.child_ids]
    return Started(runs=runs)


def _events(rt: Runtime, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.load_events(run_id) if e.type == type_]


async def test_a_workflow_starts_a_child_as_a_recorded_command(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([parent, child]))
    started = await rt.start(parent, Parent(child_ids=["kid-1"]), id="parent-1")
    run = await rt.wait_for("parent-1")
    assert run.status == "completed", run.error
    kid = await rt.wait_for("kid-1")
    assert (kid.status, kid.result) == ("completed", {"n": 6})
    assert run.result == {"runs": [kid.run_id]}
    requested = _events(rt, started.run_id, "child_workflow_requested")
    assert [(r["workflow"], r["workflow_id"], r["input"]) for r in requested] == [
        ("child", "kid-1", {"n": 3})
    ]
    resolved = _events(rt, started.run_id, "child_workflow_started")
    assert resolved == [
        {"cmd": requested[0]["cmd"], "workflow_id": "kid-1", "run_id": kid.run_id, "created": True}
    ]


async def test_a_child_id_names_one_run(make_runtime: Any) -> None:
    """A second request for an id that has a run (here: finished) starts none."""
    rt = await make_runtime(Registry.of([parent, child]))
    started = await rt.start(parent, Parent(child_ids=["kid-2", "kid-2"]), id="parent-2")
    run = await rt.wait_for("parent-2")
    assert run.status == "completed", run.error
    kid = await rt.wait_for("kid-2")
    assert run.result == {"runs": [kid.run_id, kid.run_id]}
    assert [r["created"] for r in _events(rt, started.run_id, "child_workflow_started")] == [
        True,
        False,
    ]
    assert [r.workflow_id for r in rt.store.list_runs()].count("kid-2") == 1


async def test_a_changed_child_request_is_nondeterministic_on_replay(make_runtime: Any) -> None:
    rt = await make_runtime(Registry.of([parent, child]))
    started = await rt.start(parent, Parent(child_ids=["kid-3"]), id="parent-3")
    await rt.wait_for("parent-3")
    history = export_history(rt.store, started.run_id)
    same = replay_recorded(history, Registry.of([parent, child]))
    assert same.ok and same.new_commands == [], same.problem
    changed = replay_recorded(history, Registry.of([parent_renamed, child]))
    assert not changed.ok and changed.problem and "x-kid-3" in changed.problem
