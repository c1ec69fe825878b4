"""The classic recovery experiment, on SQLite and PostgreSQL.

A ticket service in its own SQLite file stores each ticket with its unique
operation id (a second create with the same id returns the first ticket). The
workflow's activity creates a ticket; the worker is killed by SIGKILL right
after the ticket commit and before the activity's result is recorded; a fresh
worker takes over. Afterwards the service holds exactly one ticket and the
run's history refers to it. ``examples/ticket_recovery.py`` narrates the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import _history_commands as ev
from tests.engine.crash_support import CrashLab, assert_history_sound
from tests.engine.ticket_service import TicketService


@pytest.mark.parametrize("reconcile", [False, True], ids=["retry", "reconcile"])
def test_ticket_is_created_once_across_a_crash(
    db_url: str, tmp_path: Path, reconcile: bool
) -> None:
    """``retry``: the fresh worker runs the activity again with the same
    operation id and the service answers with the existing ticket.
    ``reconcile``: the lost attempt counts as ambiguous; the fresh worker asks
    the service by operation id first, finds the ticket and does not create."""
    with CrashLab(db_url, tmp_path) as lab:
        service = TicketService(lab.tickets_path)
        run_id = lab.start(
            "ticket_flow", "ticket", {"title": "Printer on fire", "reconcile": reconcile}
        )
        doomed = lab.spawn("A", fault="activity.before_complete")
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        # The ticket is committed in the service; the runtime has no result.
        [ticket] = service.tickets()
        assert ticket.operation_id == f"{run_id}:ticket"
        assert lab.completions(run_id) == {}

        fresh.go()
        run = lab.wait_settled(run_id)

        assert service.tickets() == [ticket]
        assert (run.status, run.result) == ("completed", {"ticket_id": ticket.id})
        completed = [e for e in lab.events(run_id) if e.type == ev.ACTIVITY_COMPLETED]
        assert [e.data["result"] for e in completed] == [ticket.to_json()]
        assert lab.task(run_id, ":ticket").operation_id == ticket.operation_id
        # Two recoveries may both reach for the lost attempt (the lost worker's
        # sweep and its expired lease); fencing refuses the second, which the
        # record notes after the outcome ("; stale-failure-rejected").
        outcomes = [a["outcome"].split("; ")[0] for a in lab.store.activity_attempts(run_id)]
        calls = [(c.operation_id, c.pid, c.created) for c in service.calls()]
        if reconcile:
            assert calls == [(ticket.operation_id, doomed.pid, True)]
            assert outcomes == ["failed:ambiguous", "reconciled-found"]
            assert [e.worker for e in lab.record.all()] == ["A"]
        else:
            assert calls == [
                (ticket.operation_id, doomed.pid, True),
                (ticket.operation_id, fresh.pid, False),
            ]
            assert outcomes == ["failed:transient", "completed"]
            assert [(e.worker, e.raw["ticket"]) for e in lab.record.all()] == [
                ("A", ticket.id),
                ("B", ticket.id),
            ]
        assert_history_sound(lab, run_id)
