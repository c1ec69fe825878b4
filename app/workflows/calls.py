"""Typed activity calls for workflow code, and a race between futures.

The engine records activity inputs and results as JSON. ``call`` dumps the
activity's ``Input`` model on the way in and validates its ``Result`` model on
the way out, so workflow code never indexes a dict.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from app.engine import ActivityDefn, WorkflowContext, WorkflowFuture

R = TypeVar("R", bound=BaseModel)


def activity_input(model: BaseModel) -> dict[str, Any]:
    """``model`` as the JSON the engine records (and hashes, to check replay).

    Fields a model lists in ``LATE_FIELDS`` were added after runs were
    recorded: left at their default they are omitted, so an input recorded
    before they existed still hashes the same and those runs replay.
    """
    data = model.model_dump(mode="json")
    fields = type(model).model_fields
    for name in getattr(type(model), "LATE_FIELDS", ()):
        if getattr(model, name) == fields[name].get_default(call_default_factory=True):
            data.pop(name, None)
    return data


def schedule(
    ctx: WorkflowContext, defn: ActivityDefn, input: BaseModel, *, step: str
) -> WorkflowFuture:
    return ctx.activity(defn, activity_input(input), step=step)


async def call(
    ctx: WorkflowContext, defn: ActivityDefn, input: BaseModel, result: type[R], *, step: str
) -> R:
    """Run ``defn`` with ``input``; its result as ``result``."""
    raw = await schedule(ctx, defn, input, step=step)
    return result.model_validate(raw)


def first(*futures: WorkflowFuture) -> WorkflowFuture:
    """Resolves with the index of the first future to end (however it ended).

    Deterministic: futures end in history order, so replay picks the same one.
    """
    race = WorkflowFuture(label="first")
    for index, future in enumerate(futures):

        def settle(_done: WorkflowFuture, index: int = index) -> None:
            race.set_result(index)

        future.add_done_callback(settle)
    return race
