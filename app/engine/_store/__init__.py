"""Every durable state change of the runtime, each in one short transaction.

The rules that make the runtime safe live here:

- history is appended only through :meth:`Tx.append_event` (which bumps the
  run's history length under the row lock) or by a workflow-task commit that
  is guarded by the history length it replayed (optimistic concurrency);
- activity completion, failure and heartbeats are accepted only with the
  attempt's current fencing token; stale writes are rejected and counted;
- every state change that needs work done writes its outbox row (a job) in
  the same transaction.
"""

from app.engine._store.due import NextDue
from app.engine._store.eager import EagerOffer
from app.engine._store.fused import Continued, FusedSteps
from app.engine._store.maintenance import Maintenance
from app.engine._store.reads import Reads
from app.engine._store.rows import Claim, Failure, Lingering, RunRow, StartResult
from app.engine._store.schema import STALE_WRITES
from app.engine._store.tx import Tx
from app.engine._store.workers import WorkerLiveness

__all__ = [
    "STALE_WRITES",
    "Claim",
    "Continued",
    "EagerOffer",
    "Failure",
    "Lingering",
    "RunRow",
    "StartResult",
    "Store",
    "Tx",
]


class Store(Reads, FusedSteps, Maintenance, WorkerLiveness, NextDue):
    """Every durable state change of the runtime, one short transaction each."""
