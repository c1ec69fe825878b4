"""A worker that dies mid-attempt is noticed by its silence, not by the
attempt's own timeout: a deploy must not stall runs for hours."""

from __future__ import annotations

import time
from pathlib import Path

from tests.engine.crash_support import CrashLab, assert_history_sound, by_step


def test_dead_workers_attempt_is_released_by_its_silence(db_url: str, tmp_path: Path) -> None:
    """The held activity has no heartbeat and a ten-minute start-to-close. A is
    killed while holding it; B (which needs A silent for 1 s) retries it at once."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_long_hold", "long-hold", None)
        # A holds until a gate that never opens; B has no gate and passes through.
        doomed = lab.spawn("A", worker_silence=1.0, gate=tmp_path / "never-opens")
        lab.wait_until(lambda: lab.record.of(f"{run_id}:hold") or None, "A to start the hold")
        doomed.kill()
        killed_at = time.monotonic()
        lab.spawn("B", worker_silence=1.0)
        run = lab.wait_settled(run_id, timeout=30)
        recovered_in = time.monotonic() - killed_at

        assert (run.status, run.result["worker"]) == ("completed", "B")
        assert [(e.attempt, e.worker) for e in by_step(lab.record)["hold"]] == [(1, "A"), (2, "B")]
        lost = [a for a in lab.store.activity_attempts(run_id) if a["attempt"] == 1]
        assert lost[0]["error"]["error_type"] == "WorkerLost"
        # Far below the 600 s start-to-close the attempt would otherwise wait for.
        assert recovered_in < 60, f"recovery took {recovered_in:.1f}s"
        assert_history_sound(lab, run_id)
