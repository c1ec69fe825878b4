"""Worker liveness: each worker process beats a row; the reconciler releases
the leases of a worker that stopped beating.

Without this, an attempt held by a crashed worker waits for its own lease to
run out: the heartbeat timeout, or for an activity without heartbeats its whole
start-to-close timeout (hours, for a long command). A deploy restarts every
worker, so that wait would stall every run in flight. Releasing early is safe:
fencing tokens reject whatever a worker that was only slow writes later.
"""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from app.engine._store.base import StoreBase
from app.engine._store.rows import Failure
from app.engine._store.schema import tasks
from app.engine._tables import WorkerRecord

workers = WorkerRecord.__table__  # type: ignore[attr-defined]


class WorkerLiveness(StoreBase):
    def beat(self, worker_id: str, *, code_version: str) -> None:
        """Record that ``worker_id`` is alive now.

        ``last_seen`` is this process's wall clock (the store clock, epoch
        seconds), as every other instant in the tables is: other processes,
        possibly on other machines, compare it with their own wall clock, and
        a monotonic clock means nothing outside the process that read it. The
        cost is that the silence is only as exact as the machines' clocks
        agree (NTP keeps that to milliseconds)."""
        with self.transaction() as tx:
            moved = tx.conn.execute(
                update(workers).where(workers.c.worker_id == worker_id).values(last_seen=tx.now)
            ).rowcount
            if moved:
                return
            try:
                with tx.conn.begin_nested():
                    tx.conn.execute(
                        insert(workers).values(
                            worker_id=worker_id,
                            code_version=code_version,
                            started_at=tx.now,
                            last_seen=tx.now,
                        )
                    )
            except IntegrityError:
                pass  # a concurrent beat of the same worker inserted it

    def retire(self, worker_id: str) -> None:
        """A worker shutting down: its leases may be released at once."""
        with self.transaction() as tx:
            tx.conn.execute(
                update(workers).where(workers.c.worker_id == worker_id).values(last_seen=0.0)
            )

    def leases_of_lost_workers(
        self, now: float, *, silent_for: float, limit: int = 100
    ) -> list[tuple[int, int, Failure]]:
        """Running attempts whose worker has not beaten for ``silent_for`` seconds."""
        with self.reading() as conn:
            rows = conn.execute(
                select(tasks.c.id, tasks.c.fencing_token, tasks.c.has_reconcile, tasks.c.worker_id)
                .join(workers, workers.c.worker_id == tasks.c.worker_id)
                .where(tasks.c.status == "running", workers.c.last_seen < now - silent_for)
                .limit(limit)
            ).all()
        out = []
        for row in rows:
            failure_class = "ambiguous" if row.has_reconcile else "transient"
            message = f"worker {row.worker_id} stopped beating; its attempt is presumed lost"
            out.append((row.id, row.fencing_token, Failure(failure_class, "WorkerLost", message)))
        return out
