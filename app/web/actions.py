"""The run actions the dashboard and the API offer, in one place.

The lifecycle work gives the runtime ``cancel``, ``terminate`` and ``resume``
keyed by run id with the acting user (``by=``), and ``app.run_actions.retry_run``.
Until those land, this module adapts the runtime it has: ``cancel`` and
``terminate`` keyed by workflow id, with the actor written into the reason so
history still says who acted. Nothing else in app/web calls the runtime's
action methods, so only this module changes when the new ones arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.runtime import Runtime
from app.engine.store import RunRow

ACTIONS = ("cancel", "retry", "resume", "terminate")


class ActionUnavailable(Exception):
    """This runtime cannot do that action yet (or not to a run in this state)."""


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
    if run.status in ("running",):
        return ["cancel", "terminate"]
    if run.status == "cancelling":
        return ["terminate"]
    if run.status in ("needs-human", "blocked-nondeterministic"):
        return ["cancel", "terminate"] + [a for a in ("resume",) if a in SUPPORTED]
    return [a for a in ("retry",) if a in SUPPORTED]


#: The actions this runtime can perform today (see the module docstring).
SUPPORTED = frozenset({"cancel", "terminate"})


def _reason(reason: str, by: str) -> str:
    return f"{reason.strip()} (by {by})"


async def perform(
    runtime: Runtime, run: RunRow, action: str, *, reason: str, by: str
) -> ActionResult:
    if action not in ACTIONS:
        raise ActionUnavailable(f"no action {action!r}")
    if action not in available(run):
        raise ActionUnavailable(f"{action} is not possible for a run that is {run.status}")
    if action == "cancel":
        ok = await runtime.cancel(run.workflow_id, _reason(reason, by))
        return ActionResult(
            action, run.run_id, ok, "cancellation requested" if ok else "the run is not open"
        )
    if action == "terminate":
        record = await runtime.terminate(run.workflow_id, _reason(reason, by))
        if record is None:
            return ActionResult(action, run.run_id, False, "the run is not open")
        unknown = [u["operation_id"] for u in record["uncertain"] if u["effect"] == "unknown"]
        message = "terminated" + (f"; effects unknown for {', '.join(unknown)}" if unknown else "")
        return ActionResult(action, run.run_id, True, message)
    raise ActionUnavailable(f"{action} arrives with the run lifecycle work")
