"""Collecting evidence nothing refers to (``repairbot evidence collect``, and
a periodic pass on every worker).

Most artifacts are referenced from history: an activity stored them and its
accepted result names them. The rest were written by attempts whose result
was never accepted (a worker killed mid-activity, a stale attempt, a retried
agent call) and would stay forever. An artifact is collected when it was last
put longer ago than the retention period and no run's history, input, result,
pending activity input or signal mentions its hash.

Safe beside live workers: a put moves ``last_put_at``, and the delete is
conditional on it, so bytes stored again while the collector looked are kept.
The retention period must outlast the longest activity (an artifact is
referenced only once its attempt completes); the default, seven days, is far
above the longest start-to-close timeout (three hours). The reference scan
reads every stored history once per pass: history is small by design (no
logs), and a pass runs rarely (every few hours) and only when old unreferenced
candidates exist.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Engine, Text, cast, delete, func, select

from app.app_tables import EvidenceBlob
from app.engine import ActivityTask, HistoryEvent, SignalRecord, WorkflowRun

blobs = EvidenceBlob.__table__  # type: ignore[attr-defined]

#: Default retention of unreferenced artifacts (REPAIRBOT_EVIDENCE_RETENTION_DAYS).
DEFAULT_RETENTION = 7 * 24 * 3600.0

_HASH = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")

#: The JSON columns where a reference to an artifact can live.
_REFERRING = [
    (HistoryEvent, "data"),
    (WorkflowRun, "input"),
    (WorkflowRun, "result"),
    (WorkflowRun, "error"),
    (ActivityTask, "input"),
    (ActivityTask, "result"),
    (SignalRecord, "payload"),
]


@dataclass(frozen=True)
class CollectReport:
    candidates: int
    referenced: int
    deleted: int
    bytes_freed: int


def referenced_hashes(engine: Engine, among: set[str]) -> set[str]:
    """The hashes in ``among`` that some stored record mentions."""
    found: set[str] = set()
    with engine.connect() as conn:
        for model, column in _REFERRING:
            col = getattr(model.__table__.c, column)  # type: ignore[attr-defined]
            rows = conn.execution_options(yield_per=500).execute(
                select(cast(col, Text)).where(col.is_not(None))
            )
            for (text,) in rows:
                found.update(_mentioned(text, among))
            if found == among:
                break
    return found


def _mentioned(text: str | None, among: set[str]) -> Iterable[str]:
    if not text:
        return ()
    return (sha for sha in _HASH.findall(text) if sha in among)


def collect_unreferenced(
    engine: Engine,
    *,
    retention: float = DEFAULT_RETENTION,
    now: float | None = None,
    batch: int = 10_000,
) -> CollectReport:
    """Delete artifacts untouched for ``retention`` seconds that nothing mentions."""
    cutoff = (time.time() if now is None else now) - retention
    with engine.connect() as conn:
        rows = conn.execute(
            select(blobs.c.sha256, func.length(blobs.c.data))
            .where(blobs.c.last_put_at < cutoff)
            .limit(batch)
        ).all()
    if not rows:
        return CollectReport(0, 0, 0, 0)
    sizes = {sha: int(size) for sha, size in rows}
    keep = referenced_hashes(engine, set(sizes))
    doomed = [sha for sha in sizes if sha not in keep]
    deleted = freed = 0
    for start in range(0, len(doomed), 500):
        chunk = doomed[start : start + 500]
        with engine.begin() as conn:
            gone = conn.execute(
                delete(blobs)
                .where(blobs.c.sha256.in_(chunk), blobs.c.last_put_at < cutoff)
                .returning(blobs.c.sha256)
            ).scalars()
            for sha in gone:
                deleted += 1
                freed += sizes[sha]
    return CollectReport(len(sizes), len(keep), deleted, freed)
