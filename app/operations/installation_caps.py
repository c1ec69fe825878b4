"""Per-installation caps: how many repair runs of one GitHub App installation
do costly work at once, and how much model spend its runs record per UTC day.

Both are answered from the database in one transaction, so every worker
agrees. The concurrency cap is a slot table: a run takes the lowest free slot
number below the cap, and the primary key (installation, slot) lets only one
of two racing workers have it (the other's insert fails and it looks again).
A slot whose run has closed is free again, whoever notices first, so a run
that ended without giving its slot back (killed, terminated) does not hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError

from app.app_tables import InstallationRunSlot
from app.engine import CLOSED_STATUSES, Store, schema

slots = InstallationRunSlot.__table__  # type: ignore[attr-defined]
#: The activity whose results carry the model spend (see app/operations/runs_view.py).
PRICED_ACTIVITY = "agent.propose_fix"


@dataclass(frozen=True)
class SlotTaken:
    granted: bool
    #: Runs of the installation holding a slot (this one included when granted).
    active: int


def take_slot(store: Store, installation_id: int, run_id: str, cap: int) -> SlotTaken:
    """Give ``run_id`` a slot of its installation if one is free (idempotent:
    a run that holds one keeps it)."""
    for _ in range(cap + 5):
        try:
            with store.transaction() as tx:
                conn = tx.conn
                mine = conn.execute(select(slots.c.slot).where(slots.c.run_id == run_id)).first()
                held = slots.c.installation_id == installation_id
                if mine is not None:
                    active = conn.execute(select(func.count()).where(held)).scalar_one()
                    return SlotTaken(True, int(active))
                open_runs = select(schema.runs.c.run_id).where(
                    schema.runs.c.status.not_in(CLOSED_STATUSES)
                )
                conn.execute(delete(slots).where(held, slots.c.run_id.not_in(open_runs)))
                taken = {int(r[0]) for r in conn.execute(select(slots.c.slot).where(held))}
                free = next((n for n in range(cap) if n not in taken), None)
                if free is None:
                    return SlotTaken(False, len(taken))
                conn.execute(
                    insert(slots).values(
                        installation_id=installation_id, slot=free, run_id=run_id, taken_at=tx.now
                    )
                )
                return SlotTaken(True, len(taken) + 1)
        except IntegrityError:
            continue  # another worker took that slot first: look again
    return SlotTaken(False, cap)


def release_slot(store: Store, run_id: str) -> None:
    with store.transaction() as tx:
        tx.conn.execute(delete(slots).where(slots.c.run_id == run_id))


def spent_today(store: Store, installation_id: int, now: float) -> float:
    """US dollars the installation's runs recorded for model calls since 00:00 UTC."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    of_installation = select(schema.runs.c.run_id).where(
        schema.runs.c.input["installation_id"].as_integer() == installation_id
    )
    query = select(
        func.coalesce(func.sum(schema.tasks.c.result["cost_usd"].as_float()), 0.0)
    ).where(
        schema.tasks.c.activity == PRICED_ACTIVITY,
        schema.tasks.c.status == "completed",
        schema.tasks.c.closed_at >= day.timestamp(),
        schema.tasks.c.run_id.in_(of_installation),
    )
    with store.engine.connect() as conn:
        return float(conn.execute(query).scalar_one())
