"""When the reconciler next has something to do: the earliest moment a
running attempt's lease runs out, a timer falls due, or the worker holding
a running attempt has been silent for the worker-silence setting.

The reconciler sleeps until then (capped by its interval) instead of
noticing it up to one interval late. One statement of three scalar
subqueries, each a seek on an index (``ix_activity_tasks_lease`` for the
running attempts, ``ix_timers_due`` for pending timers, the workers'
primary key); none reads the runs, so it costs the same with 10,000 runs
parked. Schedule-to-start/close timeouts and run deadlines are left to the
interval: their columns are indexed alone, so the earliest open one cannot
be found without walking past every closed task or run.
"""

from __future__ import annotations

from sqlalchemy import func, select

from app.engine._store.base import StoreBase
from app.engine._store.schema import tasks, timers
from app.engine._store.workers import workers


class NextDue(StoreBase):
    def next_due(self, *, silent_for: float) -> float | None:
        """The earliest epoch second at which a pass would find work, or None.

        Every column read here holds wall-clock epoch seconds written by
        some worker process (see :meth:`WorkerLiveness.beat`), the same
        clock the reconciler compares them with."""
        running = tasks.c.status == "running"
        lease = select(func.min(tasks.c.lease_expires_at)).where(running)
        timer = select(func.min(timers.c.fire_at)).where(timers.c.status == "pending")
        beat = (
            select(func.min(workers.c.last_seen))
            .select_from(tasks.join(workers, workers.c.worker_id == tasks.c.worker_id))
            .where(running)
        )
        with self.reading() as conn:
            row = conn.execute(
                select(lease.scalar_subquery(), timer.scalar_subquery(), beat.scalar_subquery())
            ).one()
        lease_at, fire_at, last_seen = row
        due = [float(t) for t in (lease_at, fire_at) if t is not None]
        if last_seen is not None:
            due.append(float(last_seen) + silent_for)
        return min(due, default=None)
