"""Database blips: PostgreSQL restarts under a working arq worker.

The worker rides the outage out (it retries its writes with backoff and
never exits); a result it cannot record in time is not left ``running``
until the attempt's own timeout (ten minutes here) but released as soon as
the database answers again. Runs on a private PostgreSQL cluster, the only
kind a test may restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from app.engine._db import make_engine
from app.operations.migrate import upgrade
from tests.conftest import _truncate_all
from tests.engine.crash_support import CrashLab
from tests.engine.private_services import PrivatePostgres

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres.in_temp_dir().init().start()
    upgrade(server.url)
    yield server
    server.destroy()


@pytest.fixture
def pg(private_pg: PrivatePostgres) -> PrivatePostgres:
    """The private cluster, up and emptied for this test."""
    engine = make_engine(private_pg.url)
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception:
        private_pg.start()
    _truncate_all(engine)
    engine.dispose()
    return private_pg


def _attempts(lab: CrashLab, run_id: str) -> list[tuple[str, str, str | None]]:
    return [
        (a["worker_id"].split("/")[0], a["outcome"], (a["error"] or {}).get("error_type"))
        for a in lab.store.activity_attempts(run_id)
    ]


async def test_a_result_finished_during_a_restart_is_recorded_after_it(
    pg: PrivatePostgres, tmp_path: Path, redis_url: str
) -> None:
    gate = tmp_path / "gate"
    with CrashLab(pg.url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_long_hold", "blip-record", None)
        worker = lab.spawn("A", arq=True, gate=gate)
        lab.wait_until(lambda: lab.record.of(f"{run_id}:hold"), "the attempt to start", 60)
        pg.stop()
        gate.touch()  # the activity returns while the database is away
        lab.wait_until(lambda: "database unavailable" in worker.log(), "a failed write", 30)
        pg.start()
        run = lab.wait_settled(run_id, timeout=60)
        assert run.status == "completed"
        # The first attempt's own result, recorded late: no retry was needed.
        assert _attempts(lab, run_id) == [("A", "completed", None)]
        assert worker.popen.poll() is None, "the worker exited during the outage"


async def test_a_result_that_cannot_be_recorded_is_released_when_the_database_returns(
    pg: PrivatePostgres, tmp_path: Path, redis_url: str
) -> None:
    gate = tmp_path / "gate"
    with CrashLab(pg.url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_long_hold", "blip-release", None)
        worker = lab.spawn("A", arq=True, gate=gate, db_patience=0.5)
        lab.wait_until(lambda: lab.record.of(f"{run_id}:hold"), "the attempt to start", 60)
        pg.stop()
        gate.touch()
        lab.wait_until(lambda: "could not record the result" in worker.log(), "give-up", 30)
        pg.start()
        # Without the release, attempt 1 would stay running for its ten minutes.
        run = lab.wait_settled(run_id, timeout=60)
        assert run.status == "completed"
        assert _attempts(lab, run_id) == [
            ("A", "failed:transient", "ResultNotRecorded"),
            ("A", "completed", None),
        ]
        assert worker.popen.poll() is None


async def test_a_worker_started_while_the_database_is_down_waits_for_it(
    pg: PrivatePostgres, tmp_path: Path, redis_url: str
) -> None:
    with CrashLab(pg.url, tmp_path, redis_url=redis_url) as lab:
        pg.stop()
        worker = lab.spawn("A", arq=True)
        lab.wait_until(lambda: "liveness beat failed" in worker.log(), "a failed first beat", 60)
        assert worker.popen.poll() is None, worker.log()
        pg.start()
        run_id = lab.start("crash_pipeline", "blip-start", {"steps": 2})
        run = lab.wait_settled(run_id, timeout=60)
        assert (run.status, run.result) == ("completed", [0, 1])
        assert worker.popen.poll() is None
