"""Operator actions on runs that need more than the engine: retrying a run.

Cancel, terminate and resume are engine operations (:class:`RuntimeClient`); a
retry is an application decision: a new repair run for the same request,
started only once the old run is closed, recorded with who asked and why.

The new run keeps the old run's workflow id (one per issue), so webhooks and
slash commands, which address runs by that id, reach it; its run id is the
next in that workflow id's sequence (``<workflow id>/<n>``), derived from the
old one by a counter and never reused. Retrying twice starts one run: the
second call finds the first retry active and returns it.
"""

from __future__ import annotations

from typing import Any

from app.contracts.ids import REPAIR_WORKFLOW
from app.engine import CLOSED_STATUSES, RunRow, RuntimeClient

#: Outcomes after which the fix is on the base branch: a retry would repair
#: code that no longer has the bug (or fight the revert a human decides on).
LANDED = frozenset({"merged", "merged-by-human", "fix-not-confirmed"})


class RunNotFound(LookupError):
    pass


class NotRetryable(RuntimeError):
    """The run cannot be retried (the message says why and what to do)."""


class RunStillActive(NotRetryable):
    """The run is open or parked: cancel, terminate or resume it instead."""


class RunMerged(NotRetryable):
    """The run's fix was merged: there is nothing to retry."""


def landed(run: RunRow) -> bool:
    """Whether the run ended with its fix merged into the base branch."""
    result = run.result if isinstance(run.result, dict) else {}
    return result.get("outcome") in LANDED


def original_request(runtime: RuntimeClient, run: RunRow) -> Any:
    """The input the run's chain started with (continue-as-new carries state on)."""
    while run.continued_from:
        earlier = runtime.store.load_run(run.continued_from)
        if earlier is None:
            break
        run = earlier
    return run.input


async def retry_run(runtime: RuntimeClient, run_id: str, *, reason: str, by: str | None) -> str:
    """Start a new run for the same request as the closed run ``run_id`` (a run id
    or a workflow id: its newest run); returns the new run's id."""
    old = runtime.store.find_run(run_id)
    if old is None:
        raise RunNotFound(run_id)
    if old.status not in CLOSED_STATUSES:
        raise RunStillActive(
            f"run {old.run_id} is {old.status}; cancel, terminate or resume it instead"
        )
    if old.status == "continued-as-new":
        newer = runtime.store.find_run(old.workflow_id)
        if newer is not None and newer.status not in CLOSED_STATUSES:
            raise RunStillActive(f"run {old.run_id} continues as {newer.run_id} ({newer.status})")
    if landed(old):
        raise RunMerged(
            f"run {old.run_id} merged its fix; open a new issue (or label this one again) "
            "if the bug is back"
        )
    operator = {"action": "retry", "retry_of": old.run_id, "reason": reason}
    if by:
        operator["by"] = by
    request = original_request(runtime, old)
    if old.workflow_name == REPAIR_WORKFLOW and isinstance(request, dict):
        # The new repair reads the issue as it is now (it may have been edited since).
        request = {**request, "reread_issue": True}
    started = await runtime.start_workflow(
        old.workflow_name, old.workflow_id, request, operator=operator
    )
    return started.run_id
