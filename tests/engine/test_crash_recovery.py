"""Crash recovery with real worker processes killed by SIGKILL at named fault
points, on SQLite and PostgreSQL.

Each test starts a run, lets a worker process (``tests.engine.crash_worker``)
die by SIGKILL at one fault point, then lets a fresh worker finish the run.
Executions are counted from the record file the activities append to, never
from the runtime's own bookkeeping; history and the attempts table are then
checked against that record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import _history_commands as ev
from app.engine._store import STALE_WRITES
from tests.engine.crash_support import (
    CrashLab,
    assert_history_sound,
    assert_pipeline_recovered,
    by_step,
)


def test_kill_after_side_effect_before_result_is_recorded(db_url: str, tmp_path: Path) -> None:
    """SIGKILL between an activity's effect and the recording of its result:
    the completed step never runs again, the in-flight one runs again once."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "crash-effect", {"steps": 4})
        doomed = lab.spawn("A", fault="activity.before_complete@2")
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        # The kill left step-1's effect done and its result unrecorded.
        assert [(e.op.rsplit(":")[-1], e.attempt) for e in lab.record.all()] == [
            ("step-0", 1),
            ("step-1", 1),
        ]
        assert lab.completions(run_id) == {f"{run_id}:step-0": 1}
        assert lab.task(run_id, ":step-1").status == "running"

        fresh.go()
        lab.wait_settled(run_id)

        assert_pipeline_recovered(lab, run_id, steps=4, in_flight=1, lost_by="A", retried_by="B")
        assert lab.record.of(f"{run_id}:step-1")[0].pid == doomed.pid


@pytest.mark.parametrize(
    ("fault", "committed"),
    [
        # The 1st commit would schedule step-0 (on PostgreSQL one statement).
        ("workflow_task.mid_commit@1", []),
        # The 2nd commit would schedule step-1 after step-0 completed.
        ("workflow_task.mid_commit@2", ["step-0"]),
        # The 4th (last) commit would close the run after all three steps.
        ("workflow_task.mid_commit@4", ["step-0", "step-1", "step-2"]),
    ],
    ids=["first", "scheduling", "closing"],
)
def test_kill_in_the_middle_of_a_workflow_task_commit(
    db_url: str, tmp_path: Path, fault: str, committed: list[str]
) -> None:
    """SIGKILL inside the commit transaction: none of it is visible, and a
    fresh worker replays and goes on; no activity runs twice (none was in flight)."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "crash-commit", {"steps": 3})
        # No cached execution: every workflow task commits on its own, the
        # path this test is about (fused commits: test_crash_fused.py).
        doomed = lab.spawn("A", fault=fault, cache_size=0)
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        # Exactly the earlier commits and results are there; the killed
        # commit left no event, no task, no timer and did not close the run.
        run = lab.store.find_run(run_id)
        assert run is not None and run.status == "running" and run.pending_task
        history = lab.events(run_id)
        assert [e.type for e in history] == [ev.WORKFLOW_STARTED] + [
            ev.ACTIVITY_SCHEDULED,
            ev.ACTIVITY_COMPLETED,
        ] * len(committed)
        assert [r.operation_id.rsplit(":")[-1] for r in lab.task_rows(run_id)] == committed
        assert all(r.status == "completed" for r in lab.task_rows(run_id))
        assert_history_sound(lab, run_id)
        # The killed task's own job is still in the outbox (its delete was
        # rolled back too), so the relay will offer the task again.
        assert [r.kind for r in lab.outbox_rows()] == ["workflow_task"]

        fresh.go()
        run = lab.wait_settled(run_id)

        assert (run.status, run.result) == ("completed", [0, 1, 4])
        assert lab.record.counts() == {f"{run_id}:step-{i}": 1 for i in range(3)}
        assert all(e.worker == "A" for e in lab.record.all() if e.op.rsplit(":")[-1] in committed)
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(3)}
        assert lab.events(run_id)[-1].type == ev.WORKFLOW_COMPLETED
        assert_history_sound(lab, run_id)


def test_kill_after_the_closing_workflow_task_commit(db_url: str, tmp_path: Path) -> None:
    """SIGKILL right after the workflow task that closes the run committed (on
    PostgreSQL one statement, app/engine/_store/closing.py): the run is
    closed with its terminal event, its own job consumed, nothing ran twice."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "crash-close-after", {"steps": 3})
        doomed = lab.spawn("A", fault="workflow_task.after_commit@4", cache_size=0)
        lab.wait_killed(doomed)

        run = lab.store.find_run(run_id)
        assert run is not None and (run.status, run.result) == ("completed", [0, 1, 4])
        assert not run.pending_task and run.closed_at is not None
        assert lab.events(run_id)[-1].type == ev.WORKFLOW_COMPLETED
        assert lab.record.counts() == {f"{run_id}:step-{i}": 1 for i in range(3)}
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(3)}
        assert lab.outbox_rows() == []
        assert_history_sound(lab, run_id)


def test_kill_between_heartbeats(db_url: str, tmp_path: Path) -> None:
    """SIGKILL after the 2nd heartbeat of a 4-chunk activity: its lease runs
    out one heartbeat timeout later and a fresh worker runs it once more."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_heartbeat", "crash-heartbeat", {"chunks": 4})
        doomed = lab.spawn("A", fault="activity.after_heartbeat@2")
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        # Killed between heartbeats: the progress it last reported is on the task.
        task = lab.task(run_id, ":chunked")
        assert (task.status, task.attempt, task.heartbeat_details) == (
            "running",
            1,
            {"chunks_done": 2},
        )

        fresh.go()
        run = lab.wait_settled(run_id)

        assert (run.status, run.result) == ("completed", {"before": 4, "chunks": 4, "after": 9})
        executions = by_step(lab.record)
        assert [(e.attempt, e.worker) for e in executions["before"]] == [(1, "A")]
        assert [(e.attempt, e.worker) for e in executions["chunked"]] == [(1, "A"), (2, "B")]
        assert [(e.attempt, e.worker) for e in executions["after"]] == [(1, "B")]
        assert lab.completions(run_id) == {
            f"{run_id}:before": 1,
            f"{run_id}:chunked": 1,
            f"{run_id}:after": 1,
        }
        attempts = lab.store.activity_attempts(run_id)
        chunked = [a for a in attempts if a["operation_id"].endswith(":chunked")]
        assert [a["outcome"] for a in chunked] == ["failed:transient", "completed"]
        assert chunked[0]["error"]["error_type"] == "HeartbeatTimeout"
        assert lab.task(run_id, ":chunked").heartbeat_details == {"chunks_done": 4}
        assert_history_sound(lab, run_id)


def test_paused_stale_worker_completion_is_rejected(db_url: str, tmp_path: Path) -> None:
    """A worker frozen (SIGSTOP) mid-attempt loses its lease; another worker
    retries and completes; when the first thaws (SIGCONT) and finishes, its
    completion carries a stale fencing token and is rejected and counted."""
    gate = tmp_path / "gate"
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_stale", "crash-stale", None)
        # A's reconciler makes one pass at start-up (which relays the start)
        # and A beats once; then both stay quiet, so A is frozen holding no
        # database lock that would stall B (a frozen SQLite writer blocks every
        # writer: a liveness beat under way when SIGSTOP lands did). B's
        # reconciler finds A silent by its own worker silence, as before.
        stale = lab.spawn(
            "A",
            gate=gate,
            reconcile_interval=3600,
            relay_grace=0,
            liveness_interval=3600,
            worker_silence=5 * 3600,  # the beat's interval is capped at a fifth of it
        )
        fresh = lab.spawn("B", standby=True)
        lab.wait_until(lambda: by_step(lab.record).get("gated"), "A to start the gated step")
        stale.pause()

        fresh.go()
        run = lab.wait_settled(run_id)
        # The result is the second attempt's, recorded while A was frozen.
        assert (run.status, run.result) == (
            "completed",
            {"before": 4, "gated": {"attempt": 2, "worker": "B"}, "after": 9},
        )
        assert lab.store.counter(STALE_WRITES) == 0

        gate.touch()
        stale.resume()
        lab.wait_until(lambda: lab.store.counter(STALE_WRITES) >= 1, "A's stale completion")

        gated = [
            a for a in lab.store.activity_attempts(run_id) if a["operation_id"].endswith(":gated")
        ]
        assert [
            (a["attempt"], a["fencing_token"], a["worker_id"].split("/")[0]) for a in gated
        ] == [
            (1, 1, "A"),
            (2, 2, "B"),
        ]
        # Attempt 1 was claimed eagerly, in the commit that recorded "before"
        # and scheduled "gated" (app/engine/_store/fused.py): the stale token
        # an eager claim hands out is refused like any other.
        assert gated[0]["started_at"] == lab.task(run_id, ":gated").scheduled_at
        # Attempt 1's record shows how it ended (lease expired) and that its
        # late completion was refused; attempt 2's result is the accepted one.
        assert gated[0]["error"]["error_type"] == "HeartbeatTimeout"
        assert gated[0]["outcome"] == "failed:transient; stale-completion-rejected"
        assert gated[1]["outcome"] == "completed"
        # The run, its history and the task are exactly as B left them.
        assert lab.store.find_run(run_id) == run
        assert lab.completions(run_id) == {
            f"{run_id}:before": 1,
            f"{run_id}:gated": 1,
            f"{run_id}:after": 1,
        }
        completed = [e for e in lab.events(run_id) if e.type == ev.ACTIVITY_COMPLETED]
        assert completed[1].data["result"] == {"attempt": 2, "worker": "B"}
        assert lab.task(run_id, ":gated").result == {"attempt": 2, "worker": "B"}
        executions = by_step(lab.record)
        assert [(e.attempt, e.worker) for e in executions["gated"]] == [(1, "A"), (2, "B")]
        assert len(executions["before"]) == len(executions["after"]) == 1
        assert_history_sound(lab, run_id)
