"""Crash recovery through arq over Redis: an arq worker process is killed by
SIGKILL at each point of a job's life; a fresh arq worker process resumes
the run within the worker-silence window, whatever arq's keys say.

A worker killed after taking a job out of Redis leaves nothing of it there;
one killed later leaves the work claimed in the database. Recovery never
waits for Redis: the database knows the work is undone, and the relay
re-dispatches it under a fresh job id.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from arq.constants import in_progress_key_prefix, job_key_prefix
from redis.asyncio import Redis

from tests.engine.crash_support import CrashLab, assert_history_sound, by_step

pytestmark = pytest.mark.redis

#: Worker silence for these tests: a dead worker's attempts are released after it.
SILENCE = 3.0
#: Far below arq's own expiry of the keys a crash leaves (an hour and more);
#: above the silence window plus retries and process start-up on a busy machine.
RESUME_DEADLINE = 60.0

# Where in a job's life the worker dies. ``@N``: on the N-th time it gets
# there, so the run has made progress first.
POINTS = {
    # The consumer took the job out of Redis and has not handed it over:
    # nothing of it is left in Redis, only its outbox row.
    "after-take": "arq.after_take@3",
    # The job is ours, the activity not claimed yet.
    "before-claim": "activity.before_claim@2",
    # The attempt is claimed (its lease is ours), the activity body not run.
    "after-claim": "activity.after_claim:square@2",
    # Inside the workflow task's commit transaction.
    "mid-commit": "workflow_task.mid_commit@2",
    # The workflow task committed; its follow-up jobs were never sent.
    "after-commit": "workflow_task.after_commit@2",
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
async def test_arq_worker_killed_at_each_point_of_a_job_is_resumed(
    db_url: str, tmp_path: Path, redis_url: str, point: str
) -> None:
    with CrashLab(db_url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_pipeline", f"arq-{point}", {"steps": 4})
        # A sends every job through Redis, so every job it dies in is an arq
        # job; B runs as production workers do (eager follow-up jobs).
        # The workflow-task points are about a workflow task's own commit:
        # no cached execution, so no completion is fused with it.
        unfused = point in ("mid-commit", "after-commit")
        doomed = lab.spawn(
            "A",
            arq=True,
            dispatch_only=True,
            fault=POINTS[point],
            worker_silence=SILENCE,
            cache_size=0 if unfused else 1000,
        )
        fresh = lab.spawn("B", arq=True, standby=True, worker_silence=SILENCE)
        lab.wait_killed(doomed, timeout=90)
        if point == "after-take":
            # The job the worker died holding is gone from Redis (no in-progress
            # key, no job key to stall on): the relay must send it again.
            redis = Redis.from_url(redis_url)
            locks = [k async for k in redis.scan_iter(in_progress_key_prefix + "*")]
            jobs = [k async for k in redis.scan_iter(job_key_prefix + "*")]
            await redis.aclose()
            assert (locks, jobs) == ([], [])

        fresh.go()
        run = lab.wait_settled(run_id, timeout=RESUME_DEADLINE)
        assert (run.status, run.result) == ("completed", [0, 1, 4, 9])
        # No activity body ran twice: each point is before a body or after
        # its result was recorded.
        executions = by_step(lab.record)
        assert {step: len(ran) for step, ran in executions.items()} == {
            f"step-{i}": 1 for i in range(4)
        }
        assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(4)}
        assert_history_sound(lab, run_id)
        assert lab.outbox_rows() == []
