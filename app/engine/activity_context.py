"""What an activity sees of the runtime: who it is, and a way to heartbeat."""

from __future__ import annotations

from typing import Any, TypeVar

from app.engine.db_retry import retrying
from app.engine.faults import FaultPoints
from app.engine.store import Claim, Store

T = TypeVar("T")


class Dependencies:
    """Shared clients built once per worker (GitHub factory, evidence store...),
    looked up by type so activities stay typed."""

    def __init__(self, *objects: object) -> None:
        self._by_type: dict[type, object] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: object) -> None:
        self._by_type[type(obj)] = obj

    def get(self, kind: type[T]) -> T:
        found = self._by_type.get(kind)
        if found is None:
            for obj in self._by_type.values():
                if isinstance(obj, kind):
                    return obj
            raise LookupError(f"no {kind.__name__} was given to this worker")
        assert isinstance(found, kind)
        return found


class ActivityContext:
    def __init__(
        self,
        claim: Claim,
        *,
        store: Store,
        deps: Dependencies,
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
        self.deps = deps
        self.cancel_requested = False
        self._store = store
        self._faults = faults
        #: How long a heartbeat rides out a database outage before failing.
        self.db_patience = 0.0

    async def heartbeat(self, details: Any = None) -> bool:
        """Extend the lease, record progress; True if cancellation was requested.

        Raises :class:`StaleLease` if this attempt lost its lease: stop at once.
        """
        answer = await retrying(
            lambda: self._store.heartbeat(self.task_id, self.token, details),
            what=f"heartbeating {self.operation_id}",
            patience=self.db_patience,
            in_thread=True,
        )
        self.cancel_requested = self.cancel_requested or answer
        self._faults.hit("activity.after_heartbeat", self.activity)
        return self.cancel_requested

    def dep(self, kind: type[T]) -> T:
        return self.deps.get(kind)
