"""The store's tables as the store tests read and fill them: a table's rows
straight from the database, and a run started on its own."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.engine._jobs import Job
from app.engine._store import StartResult, Store


def rows(store: Store, table: Any, *where: Any) -> list[Any]:
    with store.reading() as conn:
        return list(conn.execute(select(table).where(*where)).all())


def start(
    store: Store, workflow_id: str, *, version: int = 1, input: Any = None, **kwargs: Any
) -> tuple[StartResult, list[Job]]:
    """Start a run of workflow ``wf`` in a transaction of its own: the start
    and the jobs it wrote."""
    with store.transaction() as tx:
        started = tx.start_run(
            workflow_name="wf",
            workflow_version=version,
            workflow_id=workflow_id,
            input=input,
            **kwargs,
        )
    return started, tx.jobs
