"""When the reconciler next has work: the earliest lease expiry of a running
attempt, pending timer, or silence deadline of a worker holding a running
attempt. Finished work, fired timers and idle workers must not count. The reconciler
reads it first and skips the queries that look for those while it lies ahead."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, insert

from app.engine._jobs import Job
from app.engine._reconciler import Reconciler
from app.engine._store import Store
from app.engine._store.schema import tasks, timers
from app.engine._store.workers import workers

SILENCE = 15.0


def _task(engine: Engine, n: int, *, status: str, lease: float, worker: str) -> None:
    row: dict[str, Any] = {
        "run_id": f"r{n}",
        "cmd": 1,
        "activity": "a",
        "operation_id": f"r{n}:a",
        "input_hash": "h",
        "options": {"retry": {}, "timeouts": {}},
        "has_reconcile": False,
        "status": status,
        "attempt": 1,
        "fencing_token": 1,
        "scheduled_at": 0.0,
        "started_at": 0.0,
        "next_attempt_at": 0.0,
        "lease_expires_at": lease,
        "worker_id": worker,
        "needs_reconcile": False,
        "cancel_requested": False,
    }
    with engine.begin() as conn:
        conn.execute(insert(tasks).values(row))


def _worker(engine: Engine, worker_id: str, last_seen: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(workers).values(
                worker_id=worker_id, code_version="v", started_at=0.0, last_seen=last_seen
            )
        )


def _timer(engine: Engine, run_id: str, fire_at: float, status: str) -> None:
    with engine.begin() as conn:
        conn.execute(insert(timers).values(run_id=run_id, cmd=1, fire_at=fire_at, status=status))


def test_nothing_running_or_pending_is_never_due(db_engine: Engine) -> None:
    _worker(db_engine, "idle", last_seen=10.0)  # silent, but holds nothing
    _task(db_engine, 1, status="completed", lease=20.0, worker="idle")
    _timer(db_engine, "r1", fire_at=30.0, status="fired")
    assert Store(db_engine).next_due(silent_for=SILENCE) is None


def test_the_earliest_of_leases_timers_and_silences(db_engine: Engine) -> None:
    store = Store(db_engine)
    _worker(db_engine, "idle", last_seen=1.0)
    _worker(db_engine, "busy", last_seen=1000.0)
    _task(db_engine, 1, status="completed", lease=5.0, worker="idle")
    _task(db_engine, 2, status="running", lease=2000.0, worker="busy")
    _timer(db_engine, "r1", fire_at=3.0, status="fired")
    _timer(db_engine, "r2", fire_at=1500.0, status="pending")
    # The busy worker's silence deadline comes first.
    assert store.next_due(silent_for=SILENCE) == 1000.0 + SILENCE
    # With a longer silence the pending timer does.
    assert store.next_due(silent_for=900.0) == 1500.0
    # A running attempt whose lease runs out sooner than both.
    _task(db_engine, 3, status="running", lease=1001.0, worker="busy")
    assert store.next_due(silent_for=SILENCE) == 1001.0


class _CountingStore(Store):
    """Counts the queries for expired leases, silent workers and due timers."""

    asked: list[str]

    def expired_leases(self, now: float, limit: int = 100) -> Any:
        self.asked.append("expired_leases")
        return super().expired_leases(now, limit)

    def leases_of_lost_workers(self, now: float, *, silent_for: float, limit: int = 100) -> Any:
        self.asked.append("leases_of_lost_workers")
        return super().leases_of_lost_workers(now, silent_for=silent_for, limit=limit)

    def due_timers(self, now: float, limit: int = 100) -> Any:
        self.asked.append("due_timers")
        return super().due_timers(now, limit)


async def _no_sink(jobs: list[Job]) -> None:
    pass


def _reconciler(engine: Engine) -> tuple[Reconciler, _CountingStore]:
    store = _CountingStore(engine)
    store.asked = []
    return Reconciler(store, _no_sink, worker_silence=SILENCE), store


def test_nothing_due_yet_asks_only_when_it_will_be(db_engine: Engine) -> None:
    reconciler, store = _reconciler(db_engine)
    _worker(db_engine, "busy", last_seen=1000.0)
    _task(db_engine, 1, status="running", lease=1005.0, worker="busy")
    _timer(db_engine, "r2", fire_at=1008.0, status="pending")
    report = reconciler._repair(1001.0)
    assert store.asked == []
    assert report.next_due == 1005.0


def test_a_due_lease_or_timer_is_acted_on(db_engine: Engine) -> None:
    reconciler, store = _reconciler(db_engine)
    _worker(db_engine, "busy", last_seen=1000.0)
    _task(db_engine, 1, status="running", lease=1005.0, worker="busy")
    _timer(db_engine, "r2", fire_at=1008.0, status="pending")
    report = reconciler._repair(1006.0)
    assert store.asked == ["expired_leases", "leases_of_lost_workers", "due_timers"]
    assert report.leases_expired == 1
    assert report.next_due == 1008.0  # read again after the lease was released
