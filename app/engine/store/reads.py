"""Read-only queries: runs, history, attempts, counters."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.engine.history_commands import RecordedEvent
from app.engine.store.base import StoreBase
from app.engine.store.rows import RunRow, run_row
from app.engine.store.schema import attempts, counters, events, runs, tasks


class Reads(StoreBase):
    def load_run(self, run_id: str) -> RunRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
        return run_row(row) if row else None

    def find_run(self, key: str) -> RunRow | None:
        """A run by run id, or the newest run of a workflow id."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == key)).first()
            if row is None:
                row = conn.execute(
                    select(runs)
                    .where(runs.c.workflow_id == key)
                    .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
                    .limit(1)
                ).first()
        return run_row(row) if row else None

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunRow]:
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if status:
            query = query.where(runs.c.status == status)
        with self.engine.connect() as conn:
            return [run_row(r) for r in conn.execute(query).all()]

    def load_events(self, run_id: str, *, after: int = 0) -> list[RecordedEvent]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(events.c.seq, events.c.type, events.c.data)
                .where(events.c.run_id == run_id, events.c.seq > after)
                .order_by(events.c.seq)
            ).all()
        return [RecordedEvent(seq=r.seq, type=r.type, data=r.data) for r in rows]

    def activity_attempts(self, run_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    tasks.c.operation_id,
                    tasks.c.activity,
                    tasks.c.status.label("task_status"),
                    attempts.c.attempt,
                    attempts.c.fencing_token,
                    attempts.c.worker_id,
                    attempts.c.code_version,
                    attempts.c.started_at,
                    attempts.c.finished_at,
                    attempts.c.outcome,
                    attempts.c.error,
                )
                .join(attempts, attempts.c.task_id == tasks.c.id)
                .where(tasks.c.run_id == run_id)
                .order_by(attempts.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    def counter(self, name: str) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(select(counters.c.value).where(counters.c.name == name)).scalar()
        return int(value or 0)
