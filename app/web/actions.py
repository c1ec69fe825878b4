"""The run actions the dashboard and the API offer, in one place.

Cancel, terminate and resume are the runtime's; retry (a new run for the same
request) is ``app.operations.run_actions.retry_run``. Each records who acted (``by``)
with the reason in the run's history. Nothing else in app/web calls them, so
which actions a run in a given state offers is decided here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine import CLOSED_STATUSES, PARKED_STATUSES, RunRow, RuntimeClient
from app.operations import run_actions

ACTIONS = ("cancel", "retry", "resume", "terminate")


class ActionUnavailable(Exception):
    """Not an action, or not one for a run in this state."""


@dataclass(frozen=True)
class ActionResult:
    action: str
    run_id: str
    ok: bool
    message: str
    #: A retry starts a new run.
    new_run_id: str | None = None


def available(run: RunRow) -> list[str]:
    """The actions that make sense for a run in its current status."""
    if run.status == "running":
        return ["cancel", "terminate"]
    if run.status == "cancelling":
        return ["terminate"]
    if run.status in PARKED_STATUSES:
        return ["resume", "cancel", "terminate"]
    if run.status in CLOSED_STATUSES and run.status != "continued-as-new":
        return [] if run_actions.landed(run) else ["retry"]
    return []


async def perform(
    runtime: RuntimeClient, run: RunRow, action: str, *, reason: str, by: str
) -> ActionResult:
    if action not in ACTIONS:
        raise ActionUnavailable(f"no action {action!r}")
    if action not in available(run):
        raise ActionUnavailable(f"{action} is not possible for a run that is {run.status}")
    reason = reason.strip()
    if action == "cancel":
        ok = await runtime.cancel(run.run_id, reason, by=by)
        return ActionResult(
            action, run.run_id, ok, "cancellation requested" if ok else "the run is not open"
        )
    if action == "resume":
        ok = await runtime.resume(run.run_id, reason, by=by)
        return ActionResult(action, run.run_id, ok, "resumed" if ok else "the run is not parked")
    if action == "retry":
        try:
            new_run_id = await run_actions.retry_run(runtime, run.run_id, reason=reason, by=by)
        except (run_actions.RunNotFound, run_actions.NotRetryable) as exc:
            raise ActionUnavailable(str(exc)) from exc
        return ActionResult(action, run.run_id, True, f"retried as {new_run_id}", new_run_id)
    record = await runtime.terminate(run.run_id, reason, by=by)
    if record is None:
        return ActionResult(action, run.run_id, False, "the run is not open")
    unknown = [u["operation_id"] for u in record["uncertain"] if u["effect"] == "unknown"]
    message = "terminated" + (f"; effects unknown for {', '.join(unknown)}" if unknown else "")
    return ActionResult(action, run.run_id, True, message)
