"""Read-only queries: runs, history, attempts, counters."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, select
from sqlalchemy.exc import DBAPIError

from app.engine._history_commands import RecordedEvent
from app.engine._store.base import StoreBase
from app.engine._store.rows import RunRow, run_row
from app.engine._store.schema import attempts, counters, runs, tasks
from app.engine._store.statements import LOAD_EVENTS, LOAD_RUN, LOAD_TASK
from app.engine._tables import OPEN_STATUSES

P = ParamSpec("P")
T = TypeVar("T")


def retried_once(read: Callable[P, T]) -> Callable[P, T]:
    """Run a read again, once, when it failed on a connection the server had
    dropped (a restart or failover since the connection was last used): the
    pool was invalidated by that failure, so the second try gets a fresh
    connection. Safe for reads only; the pool pings only connections idle for
    more than ``IDLE_PING`` (app/engine/_db.py), so this covers the rest."""

    @functools.wraps(read)
    def again(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return read(*args, **kwargs)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
        return read(*args, **kwargs)

    return again


class Reads(StoreBase):
    @retried_once
    def load_run(self, run_id: str) -> RunRow | None:
        with self.reading() as conn:
            row = conn.execute(LOAD_RUN, {"p_run": run_id}).first()
        return run_row(row) if row else None

    @retried_once
    def load_task(
        self, run_id: str, *, after: int = 0
    ) -> tuple[RunRow | None, list[RecordedEvent]]:
        """What a workflow task needs, on one connection: the run and, while
        it is open, its events after ``after`` up to the history length read
        (none for a closed run). Events appended after the run row was read
        are left out (the second statement, read committed, may see them):
        the task replays exactly what its guarded commit expects."""
        if self.engine.dialect.name == "postgresql":
            return self._load_task_at_once(run_id, after)
        with self.reading() as conn:
            row = conn.execute(LOAD_RUN, {"p_run": run_id}).first()
            if row is None or row.status not in OPEN_STATUSES:
                return (run_row(row) if row else None), []
            run = run_row(row)
            found = _events(conn, run_id, after)
        return run, [event for event in found if event.seq <= run.history_length]

    def _load_task_at_once(
        self, run_id: str, after: int
    ) -> tuple[RunRow | None, list[RecordedEvent]]:
        """``load_task`` as one statement (one round trip, one snapshot)."""
        with self.reading() as conn:
            row = conn.execute(LOAD_TASK, {"p_run": run_id, "p_after": after}).first()
        if row is None:
            return None, []
        found = row.new_events or []
        return run_row(row), [
            RecordedEvent(seq=e["seq"], type=e["type"], data=e["data"]) for e in found
        ]

    @retried_once
    def find_run(self, key: str) -> RunRow | None:
        """A run by run id, or the newest run of a workflow id."""
        with self.reading() as conn:
            row = conn.execute(select(runs).where(runs.c.run_id == key)).first()
            if row is None:
                row = conn.execute(
                    select(runs)
                    .where(runs.c.workflow_id == key)
                    .order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
                    .limit(1)
                ).first()
        return run_row(row) if row else None

    @retried_once
    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunRow]:
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if status:
            query = query.where(runs.c.status == status)
        with self.reading() as conn:
            return [run_row(r) for r in conn.execute(query).all()]

    @retried_once
    def load_events(self, run_id: str, *, after: int = 0) -> list[RecordedEvent]:
        with self.reading() as conn:
            return _events(conn, run_id, after)

    @retried_once
    def activity_attempts(self, run_id: str) -> list[dict[str, Any]]:
        with self.reading() as conn:
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

    @retried_once
    def counter(self, name: str) -> int:
        with self.reading() as conn:
            value = conn.execute(select(counters.c.value).where(counters.c.name == name)).scalar()
        return int(value or 0)


def _events(conn: Connection, run_id: str, after: int) -> list[RecordedEvent]:
    rows = conn.execute(LOAD_EVENTS, {"p_run": run_id, "p_after": after}).all()
    return [RecordedEvent(seq=r.seq, type=r.type, data=r.data) for r in rows]
