"""Deploys: SIGTERM drains a worker. It stops taking jobs, lets running work
finish within its grace period, hands back what is still running (the
attempt is released at once, not after its lease or the worker's silence),
marks itself retired and exits 0 without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.engine._tables import WorkerRecord
from tests.engine.crash_support import ROOT, CrashLab

pytestmark = pytest.mark.redis

workers_table = WorkerRecord.__table__  # type: ignore[attr-defined]


def _worker_rows(lab: CrashLab) -> list[tuple[str, float]]:
    with lab.engine.connect() as conn:
        rows = conn.execute(select(workers_table.c.worker_id, workers_table.c.last_seen)).all()
    return [(r.worker_id, r.last_seen) for r in rows]


@pytest.mark.slow
async def test_sigterm_hands_back_a_running_attempt_and_exits_0(
    db_url: str, tmp_path: Path, redis_url: str
) -> None:
    with CrashLab(db_url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_long_hold", "drain", None)
        # A's attempt holds (no heartbeats, a ten-minute start-to-close) until
        # its gate opens, which it never does: only the drain can free it.
        leaving = lab.spawn("A", arq=True, gate=tmp_path / "never", drain_grace=0.5)
        staying = lab.spawn("B", arq=True, standby=True)
        lab.wait_until(lambda: lab.record.of(f"{run_id}:hold"), "A to start the attempt", 60)

        leaving.popen.send_signal(signal.SIGTERM)
        code = leaving.popen.wait(timeout=60)
        log = leaving.log()
        assert code == 0, log
        assert "Traceback" not in log
        assert [s for w, s in _worker_rows(lab) if w.startswith("A/")] == [0.0], "A not retired"

        staying.go()
        run = lab.wait_settled(run_id, timeout=60)
        assert run.status == "completed"
        assert run.result["worker"] == "B"
        attempts = lab.store.activity_attempts(run_id)
        # Handed back by the drain itself: not a lease expiry, not A's silence.
        assert [(a["worker_id"].split("/")[0], a["outcome"]) for a in attempts] == [
            ("A", "failed:transient"),
            ("B", "completed"),
        ]
        assert attempts[0]["error"]["error_type"] == "WorkerStopped"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_repairbot_worker_exits_0_on_sigterm(db_url: str, redis_url: str, tmp_path: Path) -> None:
    """The real command: a deploy's SIGTERM is not a crash."""
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "REPAIRBOT_DATA_DIR": str(tmp_path / "data"),
        "REPAIRBOT_WORKER_ID": "deploy-test",
        "REPAIRBOT_DRAIN_GRACE": "2",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "app.main.cli", "--log-level", "INFO", "worker"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        with CrashLab(db_url, tmp_path) as lab:
            deadline = time.monotonic() + 60
            while not _worker_rows(lab):  # up and beating
                assert worker.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
            output = log_path.read_text()
            assert code == 0, output
            assert "Traceback" not in output and "CancelledError" not in output, output
            assert [s for _, s in _worker_rows(lab)] == [0.0], "the worker did not retire"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
