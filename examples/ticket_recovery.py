"""The classic recovery experiment, narrated.

    python examples/ticket_recovery.py

A workflow's activity creates a ticket in a "ticket service" (its own SQLite
file, which stores each ticket with its unique operation id). Worker A is told
to SIGKILL itself right after the ticket commit and before the runtime records
the activity's result. Worker B then takes over and retries with the same
operation id. The ticket service ends up with exactly one ticket, and the
run's history refers to it. ``tests/engine/test_crash_ticket.py`` proves the
same on SQLite and PostgreSQL; this script reuses its worker and helpers.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the worker and the ticket service live in tests/engine

from app.operations.migrate import upgrade  # noqa: E402
from tests.engine.crash_support import CrashLab  # noqa: E402
from tests.engine.ticket_service import TicketService  # noqa: E402


def say(text: str) -> None:
    print(f"\n>> {text}", flush=True)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ticket-recovery-") as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'runtime.db'}"
        upgrade(db_url)
        with CrashLab(db_url, workdir) as lab:
            tickets = TicketService(lab.tickets_path)
            run_id = lab.start("ticket_flow", "ticket-demo", {"title": "Printer on fire"})
            say(
                f"Started run {run_id}; its one activity creates a ticket with operation id "
                f"{run_id}:ticket."
            )

            doomed = lab.spawn("A", fault="activity.before_complete")
            say(
                f"Worker A (pid {doomed.pid}) takes the run. It will SIGKILL itself right after "
                "the ticket commit, before the activity's result is recorded."
            )
            lab.wait_killed(doomed)
            run = lab.store.find_run(run_id)
            say(
                f"Worker A died by SIGKILL. The ticket service holds {tickets.tickets()}; "
                f"the run is still {run.status if run else '?'!r} with no result for the activity."
            )

            fresh = lab.spawn("B")
            say(
                f"Worker B (pid {fresh.pid}) starts. Once A's lease runs out it retries the "
                "activity with the same operation id."
            )
            run = lab.wait_settled(run_id)

            say("Calls the ticket service received (operation id, pid, created a ticket?):")
            for call in tickets.calls():
                print(f"   {call.operation_id}  pid {call.pid}  created={call.created}")
            say(f"Tickets now: {tickets.tickets()}")
            say(f"Run {run_id} is {run.status!r} with result {run.result}. Its history:")
            for event in lab.events(run_id):
                print(f"   {event.seq:2d} {event.type:20s} {json.dumps(event.data)[:110]}")

            [ticket] = tickets.tickets()  # exactly one, or this fails loudly
            assert run.result == {"ticket_id": ticket.id}
            say(f"Exactly one ticket (#{ticket.id}), and the run's history refers to it.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
