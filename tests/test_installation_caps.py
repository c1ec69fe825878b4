"""Per-installation caps over a real database (SQLite and PostgreSQL): the
slot table holds the concurrency cap even when workers race for the last
slot, frees the slots of runs that ended, and the day's spend is summed from
what the agent's attempts recorded. The workflow side is in
tests/e2e/test_installation_caps.py."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import cast

import pytest
from sqlalchemy import Engine, insert, update

from activities.installation_caps import InstallationCapsActivities
from app.config import Settings
from app.contracts.installation_caps import SlotAnswer
from app.engine import ActivityContext
from app.engine._store import Store
from app.engine._store.schema import runs, tasks
from app.operations.installation_caps import PRICED_ACTIVITY, release_slot, spent_today, take_slot
from tests.activities.support import body

INSTALLATION = 7


def _run(engine: Engine, run_id: str, installation: int = INSTALLATION) -> None:
    now = time.time()
    with engine.begin() as conn:
        conn.execute(
            insert(runs).values(
                run_id=run_id,
                workflow_id=f"repair:o/r#{run_id}",
                workflow_name="repair",
                workflow_version=2,
                status="running",
                input={"repo": "o/r", "installation_id": installation},
                created_at=now,
                updated_at=now,
            )
        )


def _priced(engine: Engine, run_id: str, cost: float, at: float, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(tasks).values(
                run_id=run_id,
                cmd=n,
                activity=PRICED_ACTIVITY,
                operation_id=f"{run_id}:propose-{n}",
                input={},
                input_hash="x",
                options={},
                status="completed",
                scheduled_at=at,
                next_attempt_at=at,
                result={"cost_usd": cost},
                closed_at=at,
            )
        )


def test_the_cap_holds_when_workers_race_for_the_last_slot(db_engine: Engine) -> None:
    store = Store(db_engine)
    names = [f"run-{i}" for i in range(12)]
    for name in names:
        _run(db_engine, name)
    granted: list[str] = []
    start = threading.Barrier(len(names))

    def worker(name: str) -> None:
        start.wait()
        if take_slot(store, INSTALLATION, name, cap=3).granted:
            granted.append(name)

    threads = [threading.Thread(target=worker, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 3
    # Asking again is idempotent for a holder, and still no for the rest.
    assert take_slot(store, INSTALLATION, granted[0], cap=3).granted
    refused = next(n for n in names if n not in granted)
    assert take_slot(store, INSTALLATION, refused, cap=3).active == 3


def test_slots_of_ended_runs_and_released_slots_are_free_again(db_engine: Engine) -> None:
    store = Store(db_engine)
    for name in ("a", "b", "c"):
        _run(db_engine, name)
    assert take_slot(store, INSTALLATION, "a", cap=1).granted
    assert not take_slot(store, INSTALLATION, "b", cap=1).granted
    # "a" was killed without giving its slot back: its run closing frees it.
    with db_engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.run_id == "a").values(status="failed"))
    assert take_slot(store, INSTALLATION, "b", cap=1).granted
    release_slot(store, "b")
    assert take_slot(store, INSTALLATION, "c", cap=1).granted
    # Another installation has slots of its own.
    _run(db_engine, "other", installation=8)
    assert take_slot(store, 8, "other", cap=1).granted


def test_the_days_spend_counts_this_installation_since_midnight_utc(db_engine: Engine) -> None:
    store = Store(db_engine)
    now = datetime(2026, 12, 2, 15, 0, tzinfo=UTC).timestamp()
    yesterday = now - timedelta(hours=16).total_seconds()
    _run(db_engine, "mine")
    _run(db_engine, "theirs", installation=8)
    _priced(db_engine, "mine", 1.25, now - 60, 1)
    _priced(db_engine, "mine", 0.50, now - 120, 2)
    _priced(db_engine, "mine", 9.00, yesterday, 3)  # before 00:00 UTC
    _priced(db_engine, "theirs", 4.00, now - 60, 4)
    assert spent_today(store, INSTALLATION, now) == 1.75
    assert spent_today(store, 8, now) == 4.0
    assert spent_today(store, 9, now) == 0.0


@pytest.mark.parametrize(("cap", "taken"), [(0, False), (3, True)])
async def test_a_grant_says_whether_it_took_a_slot(
    db_engine: Engine, cap: int, taken: bool
) -> None:
    """With the active-run cap off nothing is taken, so the run has nothing to give back."""
    _run(db_engine, "run-1")
    caps = InstallationCapsActivities(
        Settings(max_active_runs_per_installation=cap), Store(db_engine)
    )
    actx = cast(ActivityContext, SimpleNamespace(run_id="run-1"))
    raw = await body(caps, "caps.take_slot").fn(actx, {"installation_id": INSTALLATION})
    answer = SlotAnswer.model_validate(raw)
    assert answer.granted and answer.slot_taken is taken
