"""Resuming a parked run: an operator fixed what made it stop; the code goes on.

A run parks as ``needs-human`` (a reconcile could not tell whether an effect
happened, or the workflow asked for a human) or ``blocked-nondeterministic``
(its code no longer matches its history). Resuming reopens it and runs a
workflow task, which replays the whole history against the code deployed now:

- blocked-nondeterministic: after a code fix (usually a ``patched()`` marker)
  the replay matches and the run continues; unchanged code parks it again.
- needs-human: the workflow receives a signal named :data:`OPERATOR_RESUME`
  (payload: reason and who), which code waiting in ``ctx.wait_for_operator()``
  or ``ctx.wait_signal(OPERATOR_RESUME)`` acts on; an activity parked by its
  reconcile is scheduled again and reconciles first.

While parked, attempts that were in flight may have finished and timers may
have fired; their rows were written but their events could not be (history
only grows for open runs). Resuming appends those events first, in order, so
nothing the code waits for is lost.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from app.engine import _history_commands as ev
from app.engine._jobs import activity_job
from app.engine._policy import ActivityOptions
from app.engine._registry import OPERATOR_RESUME
from app.engine._store.schema import events, runs, tasks, timers
from app.engine._store.tx import Tx
from app.engine._tables import PARKED_STATUSES

__all__ = ["OPERATOR_RESUME", "resume_run"]


def resume_run(tx: Tx, key: str, reason: str, *, by: str | None = None) -> bool:
    """Reopen the parked run ``key`` names (run id or workflow id); False if none."""
    run = tx.target(key)
    if run is None or run.status not in PARKED_STATUSES:
        return False
    parked_as = run.status
    # The workflow may declare its own resume signal (recorded when it parked).
    resume_signal = str((run.error or {}).get("resume_signal") or OPERATOR_RESUME)
    tx.conn.execute(
        update(runs)
        .where(runs.c.run_id == run.run_id)
        .values(status="running", error=None, updated_at=tx.now)
    )
    _backfill(tx, run.run_id)
    data: dict[str, Any] = {"reason": reason, "from": parked_as} | ({"by": by} if by else {})
    seq = tx.append_event(run.run_id, ev.RUN_RESUMED, data)
    if parked_as == "needs-human":
        _reschedule_parked_activities(tx, run.run_id)
        tx.signal(run.workflow_id, resume_signal, data, f"{resume_signal}:{run.run_id}:{seq}")
    return True


def _backfill(tx: Tx, run_id: str) -> None:
    """Events for activity outcomes and timer firings recorded while parked."""
    seen = tx.conn.execute(
        select(events.c.type, events.c.data).where(
            events.c.run_id == run_id,
            events.c.type.in_((ev.ACTIVITY_COMPLETED, ev.ACTIVITY_FAILED, ev.TIMER_FIRED)),
        )
    ).all()
    resolved = {(row.type == ev.TIMER_FIRED, int(row.data["cmd"])) for row in seen}
    done = tx.conn.execute(
        select(tasks)
        .where(tasks.c.run_id == run_id, tasks.c.status.in_(("completed", "failed", "cancelled")))
        .order_by(tasks.c.closed_at, tasks.c.id)
    ).all()
    for task in done:
        failure = task.last_failure or {}
        if (False, task.cmd) in resolved or failure.get("failure_class") == "needs-human":
            continue
        base = {"cmd": task.cmd, "activity": task.activity, "attempts": task.attempt}
        if task.status == "completed":
            tx.append_event(run_id, ev.ACTIVITY_COMPLETED, base | {"result": task.result})
        else:
            tx.append_event(
                run_id,
                ev.ACTIVITY_FAILED,
                base
                | {
                    "failure_class": failure.get("failure_class", "permanent"),
                    "error_type": failure.get("error_type", ""),
                    "message": failure.get("message", ""),
                },
            )
    fired = tx.conn.execute(
        select(timers.c.cmd).where(timers.c.run_id == run_id, timers.c.status == "fired")
    ).scalars()
    for cmd in sorted(fired):
        if (True, int(cmd)) not in resolved:
            tx.append_event(run_id, ev.TIMER_FIRED, {"cmd": int(cmd)})


def _reschedule_parked_activities(tx: Tx, run_id: str) -> None:
    """Activities a reconcile parked: reconcile again, then act (the operator fixed it)."""
    parked = tx.conn.execute(
        select(tasks).where(tasks.c.run_id == run_id, tasks.c.status == "failed")
    ).all()
    for task in parked:
        if (task.last_failure or {}).get("failure_class") != "needs-human":
            continue
        close = ActivityOptions.from_json(task.options).timeouts.schedule_to_close
        tx.conn.execute(
            update(tasks)
            .where(tasks.c.id == task.id)
            .values(
                status="scheduled",
                needs_reconcile=True,
                closed_at=None,
                next_attempt_at=tx.now,
                schedule_to_close_deadline=tx.now + close if close else None,
            )
        )
        tx.add_job(activity_job(int(task.id), task.attempt + 1, tx.now, activity=task.activity))
