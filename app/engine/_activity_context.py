"""What an activity sees of the runtime: who it is, and a way to heartbeat.

Heartbeat details double as a checkpoint: an activity that saves one with
:meth:`ActivityContext.checkpoint` finds it in ``last_checkpoint`` on its
next attempt (after a crash, a lost lease or a transient failure), and every
later heartbeat carries it along, so a progress beat never erases it.
"""

from __future__ import annotations

from typing import Any

from app.engine._db_retry import retrying
from app.engine._faults import FaultPoints
from app.engine._store import Claim, Store
from app.engine._store.async_store import StoreThreads

#: The key under which a checkpoint travels in the heartbeat details.
CHECKPOINT_KEY = "checkpoint"
#: The key under which counts an activity keeps across attempts travel.
CARRIED_KEY = "carried"


class ActivityContext:
    def __init__(
        self,
        claim: Claim,
        *,
        store: Store,
        threads: StoreThreads,
        worker_id: str,
        faults: FaultPoints,
    ) -> None:
        self.run_id = claim.run_id
        self.workflow_id = claim.workflow_id
        self.operation_id = claim.operation_id
        self.activity = claim.activity
        self.attempt = claim.attempt
        self.task_id = claim.task_id
        self.token = claim.token
        self.worker_id = worker_id
        self.cancel_requested = False
        self._store = store
        self._threads = threads
        self._faults = faults
        previous = claim.heartbeat_details
        #: The checkpoint the previous attempt saved last (``None`` on a first attempt).
        self.last_checkpoint: Any = (
            previous.get(CHECKPOINT_KEY) if isinstance(previous, dict) else None
        )
        self._checkpoint: Any = self.last_checkpoint
        carried = previous.get(CARRIED_KEY) if isinstance(previous, dict) else None
        #: Small values earlier attempts recorded with :meth:`carry` (what they
        #: ended with: an attempt that died recorded nothing).
        self.carried: dict[str, Any] = dict(carried) if isinstance(carried, dict) else {}
        #: How long a heartbeat rides out a database outage before failing.
        self.db_patience = 0.0

    async def heartbeat(self, details: Any = None) -> bool:
        """Extend the lease, record progress; True if cancellation was requested.

        Raises :class:`StaleLease` if this attempt lost its lease: stop at once.
        """
        if self._checkpoint is not None or self.carried:
            progress = details if isinstance(details, dict) else {"progress": details}
            details = dict(progress)
            if self._checkpoint is not None:
                details[CHECKPOINT_KEY] = self._checkpoint
            if self.carried:
                details[CARRIED_KEY] = dict(self.carried)
        answer = await retrying(
            lambda: self._store.heartbeat(self.task_id, self.token, details),
            what=f"heartbeating {self.operation_id}",
            patience=self.db_patience,
            threads=self._threads,
        )
        self.cancel_requested = self.cancel_requested or answer
        self._faults.hit("activity.after_heartbeat", self.activity)
        return self.cancel_requested

    async def checkpoint(self, value: Any) -> bool:
        """Record ``value`` durably (a heartbeat) for a later attempt to resume
        from; True if cancellation was requested. Keep it small: it is
        rewritten with every heartbeat; large bodies go to evidence."""
        self._checkpoint = value
        return await self.heartbeat({})

    async def carry(self, key: str, value: Any) -> bool:
        """Record ``value`` under ``key`` durably for the next attempts (they see
        it in :attr:`carried`), beside any checkpoint; True if cancellation was
        requested. For what an attempt learnt before it ends on purpose."""
        self.carried[key] = value
        return await self.heartbeat({})

    def fault(self, name: str) -> None:
        """A named fault point inside the activity's own code (crash tests)."""
        self._faults.hit(name, self.activity)
