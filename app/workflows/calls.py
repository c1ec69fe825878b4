"""Typed activity calls for workflow code, and a race between futures.

Activities are typed (``typed_activity``): ``call`` returns the activity's
result model, with the step named by the caller (repair's step names are
GitHub markers and recorded history, so they stay explicit).

It also waits out a suspended installation: GitHub refuses every call of a
suspended installation (403 "This installation has been suspended"), which
the activity reports as :class:`InstallationSuspended` without retrying.
The run then parks on a durable signal (holding no worker) until
``installation.unsuspend`` sends :data:`INSTALLATION_RESUMED`, and calls the
activity again under a new step (its operation markers, in the activity's
input, stay the same, so a mutation that did land is found, not repeated).
A lost unsuspend delivery costs at most :data:`SUSPENDED_RECHECK_SECONDS`.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from app.contracts.triage_inputs import INSTALLATION_RESUMED
from app.engine import ActivityError, TypedActivity, WorkflowContext, WorkflowFuture
from app.github.errors import InstallationSuspended

I = TypeVar("I", bound=BaseModel)  # noqa: E741 (an activity's input model)
R = TypeVar("R", bound=BaseModel)
#: Runs recorded before this change ended the call in error after its retries.
SUSPENSION_WAITS = "suspended-installation-waits"
#: How long a run waits for the unsuspend before it tries again anyway.
SUSPENDED_RECHECK_SECONDS = 3600.0


def schedule(
    ctx: WorkflowContext, defn: TypedActivity[I, R], input: I, *, step: str
) -> WorkflowFuture:
    """``defn`` scheduled under ``step``; its future resolves with the JSON
    result (:func:`call` validates it)."""
    return ctx.schedule(defn, input, step=step).future


async def call(ctx: WorkflowContext, defn: TypedActivity[I, R], input: I, *, step: str) -> R:
    """Run ``defn`` with ``input`` and return its result model. While the
    installation is suspended, wait for it to be unsuspended and call again."""
    waits = 0
    while True:
        try:
            return await ctx.schedule(defn, input, step=again(step, waits))
        except ActivityError as error:
            if not waits_out(ctx, error):
                raise
        waits += 1
        await unsuspended(ctx)


def suspended(error: ActivityError) -> bool:
    """Whether the activity stopped because the installation is suspended."""
    return error.error_type == InstallationSuspended.__name__


def waits_out(ctx: WorkflowContext, error: ActivityError) -> bool:
    """Whether the run waits ``error`` out (the installation's suspension)
    and calls again; False: the error stands."""
    return suspended(error) and ctx.patched(SUSPENSION_WAITS)


def unsuspended(ctx: WorkflowContext) -> WorkflowFuture:
    """Resolves on ``installation.unsuspend`` (or after the recheck time)."""
    return ctx.wait_signal(INSTALLATION_RESUMED, timeout=SUSPENDED_RECHECK_SECONDS)


def again(step: str, waits: int) -> str:
    """The step of the call made after the ``waits``-th suspension (steps are unique)."""
    return f"{step}~{waits}" if waits else step


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
