"""Crash recovery around the fused step (app/engine/_store/fused.py): one
transaction records an activity's result, commits the workflow task it
wakes and claims the next activity for the same worker.

A worker process is killed by SIGKILL before, inside and after that
transaction; a fresh worker finishes the run. As in test_crash_recovery.py,
executions are counted from the record file the activities append to, and
the database is read directly to see what the killed commit left.

In ``crash_pipeline`` the first completion (step-0) is fused with the task
that schedules step-1, so ``@2`` is the commit of step-1's result that would
schedule and claim step-2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from app.engine import _history_commands as ev
from tests.engine.crash_support import (
    CrashLab,
    assert_history_sound,
    assert_pipeline_recovered,
    by_step,
)

STEPS = 4


def _prefix(run_id: str, lab: CrashLab) -> list[str]:
    return [e.type for e in lab.events(run_id)]


@pytest.mark.parametrize("fault", ["fused.before_commit@2", "fused.mid_commit@2"])
def test_kill_before_or_inside_the_fused_commit(db_url: str, tmp_path: Path, fault: str) -> None:
    """Nothing of the killed commit is visible: step-1's result is lost with
    it (as a kill before any completion loses it), so step-1 runs again once;
    step-2 is neither scheduled nor claimed; every other step runs once."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "fused-kill", {"steps": STEPS})
        doomed = lab.spawn("A", fault=fault)
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        assert _prefix(run_id, lab) == [
            ev.WORKFLOW_STARTED,
            ev.ACTIVITY_SCHEDULED,
            ev.ACTIVITY_COMPLETED,
            ev.ACTIVITY_SCHEDULED,
        ]
        rows = lab.task_rows(run_id)
        assert [(r.operation_id.rsplit(":")[-1], r.status) for r in rows] == [
            ("step-0", "completed"),
            ("step-1", "running"),
        ]
        # step-1 was claimed eagerly, in the commit that scheduled it.
        step1 = lab.task(run_id, ":step-1")
        assert (step1.attempt, step1.fencing_token) == (1, 1)
        assert step1.started_at == step1.scheduled_at
        assert lab.outbox_rows() == []
        assert [e.worker for e in lab.record.of(f"{run_id}:step-1")] == ["A"]

        fresh.go()
        lab.wait_settled(run_id)
        assert_pipeline_recovered(
            lab, run_id, steps=STEPS, in_flight=1, lost_by="A", retried_by="B"
        )
        assert lab.outbox_rows() == []


def test_kill_after_the_fused_commit(db_url: str, tmp_path: Path) -> None:
    """The commit recorded step-1's result and claimed step-2 for the killed
    worker, which never ran it. A second worker cannot take that claim while
    it holds; once the dead worker's silence releases it, step-2 runs once,
    as attempt 2. No step runs twice."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "fused-after", {"steps": STEPS})
        doomed = lab.spawn("A", fault="fused.after_commit@2", worker_silence=2.0)
        fresh = lab.spawn("B", standby=True, worker_silence=2.0)
        lab.wait_killed(doomed)

        assert lab.completions(run_id) == {f"{run_id}:step-0": 1, f"{run_id}:step-1": 1}
        step2 = lab.task(run_id, ":step-2")
        assert (step2.status, step2.attempt, step2.fencing_token) == ("running", 1, 1)
        assert step2.worker_id.split("/")[0] == "A"
        assert step2.started_at == step2.scheduled_at  # claimed in the same commit
        assert lab.outbox_rows() == []  # an eager claim has no job
        assert lab.record.of(f"{run_id}:step-2") == []

        # A second worker racing for the eagerly claimed task gets nothing.
        raced = lab.store.claim_activity(step2.id, worker_id="C", code_version="dev")
        assert raced is None
        step2_attempts = [
            a for a in lab.store.activity_attempts(run_id) if a["operation_id"].endswith(":step-2")
        ]
        assert [(a["attempt"], a["worker_id"].split("/")[0]) for a in step2_attempts] == [(1, "A")]

        fresh.go()
        run = lab.wait_settled(run_id)
        assert (run.status, run.result) == ("completed", [i * i for i in range(STEPS)])
        executions = by_step(lab.record)
        assert {step: [(e.attempt, e.worker) for e in ran] for step, ran in executions.items()} == {
            "step-0": [(1, "A")],
            "step-1": [(1, "A")],
            "step-2": [(2, "B")],
            "step-3": [(1, "B")],
        }
        step2_attempts = [
            a for a in lab.store.activity_attempts(run_id) if a["operation_id"].endswith(":step-2")
        ]
        # Attempt 1 was released as lost (transient). Two recoveries may both
        # reach for it (the lost worker's sweep and its expired lease); fencing
        # refuses the second, which the record notes ("; stale-failure-rejected").
        assert [
            (a["attempt"], a["fencing_token"], a["worker_id"].split("/")[0]) for a in step2_attempts
        ] == [(1, 1, "A"), (2, 2, "B")]
        assert step2_attempts[0]["outcome"].split("; ")[0] == "failed:transient"
        assert step2_attempts[1]["outcome"] == "completed"
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.outbox_rows() == []
        assert_history_sound(lab, run_id)


def test_kill_after_the_first_workflow_task_commit(db_url: str, tmp_path: Path) -> None:
    """A run's first workflow task claims step-0 in its own commit for the
    worker that runs it; that worker is killed before running it. Once its
    silence releases the claim, step-0 runs once, as attempt 2, elsewhere."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "first-task-after", {"steps": STEPS})
        doomed = lab.spawn("A", fault="workflow_task.after_commit@1", worker_silence=2.0)
        fresh = lab.spawn("B", standby=True, worker_silence=2.0)
        lab.wait_killed(doomed)

        step0 = lab.task(run_id, ":step-0")
        assert (step0.status, step0.attempt, step0.fencing_token) == ("running", 1, 1)
        assert step0.worker_id.split("/")[0] == "A"
        assert step0.started_at == step0.scheduled_at  # claimed in the task's commit
        assert lab.outbox_rows() == []  # an eager claim has no job
        assert lab.record.of(f"{run_id}:step-0") == []

        fresh.go()
        run = lab.wait_settled(run_id)
        assert (run.status, run.result) == ("completed", [i * i for i in range(STEPS)])
        executions = by_step(lab.record)
        assert [(e.attempt, e.worker) for e in executions["step-0"]] == [(2, "B")]
        assert {step: len(ran) for step, ran in executions.items()} == {
            f"step-{i}": 1 for i in range(STEPS)
        }
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.outbox_rows() == []
        assert_history_sound(lab, run_id)


@pytest.mark.parametrize("fault", ["fused.before_commit@4", "fused.mid_commit@4"])
def test_kill_before_or_inside_the_fused_close(db_url: str, tmp_path: Path, fault: str) -> None:
    """The last step's result fused with the run's close (on PostgreSQL one
    statement, app/engine/_store/closing.py): a kill before or inside it
    leaves the run open with step-3 running, nothing of the close written.
    Step-3 runs again once elsewhere and the run closes once."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "fused-close-kill", {"steps": STEPS})
        doomed = lab.spawn("A", fault=fault)
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        run = lab.store.find_run(run_id)
        assert run is not None and (run.status, run.closed_at) == ("running", None)
        assert _prefix(run_id, lab) == [ev.WORKFLOW_STARTED] + [
            ev.ACTIVITY_SCHEDULED,
            ev.ACTIVITY_COMPLETED,
        ] * (STEPS - 1) + [ev.ACTIVITY_SCHEDULED]
        assert lab.task(run_id, f":step-{STEPS - 1}").status == "running"
        assert lab.outbox_rows() == []

        fresh.go()
        lab.wait_settled(run_id)
        assert_pipeline_recovered(
            lab, run_id, steps=STEPS, in_flight=STEPS - 1, lost_by="A", retried_by="B"
        )
        assert lab.events(run_id)[-1].type == ev.WORKFLOW_COMPLETED
        assert lab.outbox_rows() == []


def test_kill_after_the_fused_close(db_url: str, tmp_path: Path) -> None:
    """A kill right after the fused close committed: the run is closed with
    its result and terminal event, every step ran once, no job is left."""
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_pipeline", "fused-close-after", {"steps": STEPS})
        doomed = lab.spawn("A", fault=f"fused.after_commit@{STEPS}")
        lab.wait_killed(doomed)

        run = lab.store.find_run(run_id)
        assert run is not None
        assert (run.status, run.result) == ("completed", [i * i for i in range(STEPS)])
        assert run.closed_at is not None
        assert lab.events(run_id)[-1].type == ev.WORKFLOW_COMPLETED
        assert lab.record.counts() == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.outbox_rows() == []
        assert_history_sound(lab, run_id)


@pytest.mark.redis
async def test_redis_flushed_between_the_fused_commit_and_its_dispatch(
    db_url: str, tmp_path: Path, redis_url: str
) -> None:
    """An arq worker that sends every job through Redis commits step-1's
    result and step-2's schedule in one transaction and dies before sending
    step-2's job; Redis is then flushed. The outbox row written in that
    commit brings the job back: step-2 runs once, nothing runs twice."""
    with CrashLab(db_url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_pipeline", "fused-flush", {"steps": STEPS})
        doomed = lab.spawn("A", arq=True, dispatch_only=True, fault="fused.after_commit@2")
        fresh = lab.spawn("B", arq=True, standby=True)
        lab.wait_killed(doomed, timeout=90)

        assert lab.completions(run_id) == {f"{run_id}:step-0": 1, f"{run_id}:step-1": 1}
        step2 = lab.task(run_id, ":step-2")
        assert (step2.status, step2.attempt) == ("scheduled", 0)  # no eager claim here
        assert [(r.kind, r.ref) for r in lab.outbox_rows()] == [("activity", str(step2.id))]
        redis = Redis.from_url(redis_url)
        await redis.flushdb()
        await redis.aclose()

        fresh.go()
        run = lab.wait_settled(run_id, timeout=60)
        assert (run.status, run.result) == ("completed", [i * i for i in range(STEPS)])
        assert lab.record.counts() == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(STEPS)}
        assert lab.outbox_rows() == []
        assert_history_sound(lab, run_id)
