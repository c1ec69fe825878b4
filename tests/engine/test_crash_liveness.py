"""A worker that dies mid-attempt is noticed by its silence, not by the
attempt's own timeout: a deploy must not stall runs for hours."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.engine.crash_support import CrashLab, WorkerProcess, assert_history_sound, by_step


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


#: Far longer than the test may take: no periodic pass runs after start-up.
LONG_INTERVAL = 30.0
SHORT_SILENCE = 2.0


def test_reconciler_wakes_at_a_dead_workers_silence_not_its_interval(
    db_url: str, tmp_path: Path
) -> None:
    """Both workers pass only every 30 s; A dies holding an attempt and B
    retries it once A has been silent for 2 s: only the pass B schedules
    for A's silence deadline can have released it."""
    _released_at_the_silence_deadline(CrashLab(db_url, tmp_path), arq=False)


@pytest.mark.redis
@pytest.mark.parametrize("dispatch_only", [False, True], ids=["eager", "through-redis"])
def test_arq_retry_reaches_another_worker_without_a_poll(
    db_url: str, tmp_path: Path, redis_url: str, dispatch_only: bool
) -> None:
    """The same through arq, with the consumers' fallback poll at 30 s. Eager
    (as production runs): B's pass releases the attempt and B runs the retry
    itself. Every job through Redis: the retry's job can only reach a
    consumer by the doorbell."""
    lab = CrashLab(db_url, tmp_path, redis_url=redis_url)
    _released_at_the_silence_deadline(lab, arq=True, dispatch_only=dispatch_only)


def _released_at_the_silence_deadline(
    lab: CrashLab, *, arq: bool, dispatch_only: bool = False
) -> None:
    def spawn(worker_id: str, gate: Path | None = None) -> WorkerProcess:
        return lab.spawn(
            worker_id,
            gate=gate,
            arq=arq,
            dispatch_only=dispatch_only,
            worker_silence=SHORT_SILENCE,
            reconcile_interval=LONG_INTERVAL,
            poll_delay=LONG_INTERVAL,
        )

    with lab:
        run_id = lab.start("crash_long_hold", "deadline-wake", None)
        # A's start-up pass must find the start's outbox row already lingering.
        started = time.time()
        lab.wait_until(lambda: time.time() > started + 0.2, "the relay grace to pass")
        doomed = spawn("A", gate=lab.workdir / "never-opens")
        lab.wait_until(lambda: lab.record.of(f"{run_id}:hold") or None, "A to start the hold")
        spawn("B")
        # B's start-up passes run with its first beat: by its second they are
        # over, and they ran while A was alive and beating.
        lab.wait_until(
            lambda: (row := lab.liveness("B")) is not None and row.last_seen > row.started_at,
            "B to beat twice",
        )
        doomed.kill()
        last_beat = lab.liveness("A").last_seen  # final: A is dead
        b_started = lab.liveness("B").started_at
        run = lab.wait_settled(run_id, timeout=LONG_INTERVAL - 5)

        assert (run.status, run.result["worker"]) == ("completed", "B")
        lost, retry = lab.store.activity_attempts(run_id)
        assert (lost["attempt"], lost["error"]["error_type"]) == (1, "WorkerLost")
        assert (retry["attempt"], retry["worker_id"].split("/")[0]) == (2, "B")
        # The releasing pass (its transaction's clock is the attempt's end)
        # came no earlier than A's silence deadline, and before B's interval
        # would have run any pass after its start-up ones.
        assert last_beat + SHORT_SILENCE <= lost["finished_at"] < b_started + LONG_INTERVAL
        assert_history_sound(lab, run_id)
