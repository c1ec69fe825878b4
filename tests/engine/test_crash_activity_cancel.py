"""A stop asked of one activity survives the crash of the worker that asked:
the request is committed with the workflow task, not sent afterwards."""

from __future__ import annotations

from pathlib import Path

from app.engine import _history_commands as ev
from tests.engine.crash_support import CrashLab, assert_history_sound, by_step


def test_a_stop_committed_just_before_a_sigkill_still_stops_the_activity(
    db_url: str, tmp_path: Path
) -> None:
    """Worker A runs the activity (20 s of heartbeats) and the workflow; the
    timer fires and A commits the stop, then is SIGKILLed before its activity
    could notice (the second workflow-task commit is the stop's). B takes over:
    the dead attempt is not retried, and the run ends with the activity
    stopped. Had the request been sent after the commit, or been lost with A,
    B would run the activity again to its end and the run would say
    ``finished``."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_stop_one", "stop-one", {"chunks": 400, "seconds": 1.0})
        doomed = lab.spawn("A", fault="workflow_task.after_commit@2", worker_silence=1.0)
        fresh = lab.spawn("B", worker_silence=1.0, standby=True)
        lab.wait_killed(doomed, timeout=60)
        # What A committed before it died: the request, on the task's row.
        assert [e.type for e in lab.events(run_id)].count(ev.ACTIVITY_CANCEL_REQUESTED) == 1
        work = lab.task(run_id, ":work")
        assert work.cancel_requested and work.status == "running"
        # A died with its attempt: the activity never got to notice by itself.
        assert [line.raw.get("stopped") for line in lab.record.of(f"{run_id}:work")] == [None]
        fresh.go()
        run = lab.wait_settled(run_id, timeout=60)

        assert run.status == "completed", run.error
        assert run.result["work"] != "finished", run.result
        assert run.result["error_type"] in ("WorkerLost", "HeartbeatTimeout"), run.result
        # One execution, by A: B never started the stopped activity again.
        assert [(e.attempt, e.worker) for e in by_step(lab.record)["work"]] == [(1, "A")]
        assert lab.task(run_id, ":work").status in ("failed", "cancelled")
        assert_history_sound(lab, run_id)
