"""Crash recovery through arq over Redis: a worker process dispatching through
arq is killed by SIGKILL mid-run; a fresh arq worker process resumes the run.

The killed worker's arq job stays marked in progress in Redis; recovery does
not depend on it, because the database knows the attempt's lease ran out and
the retry is a new job (job ids carry the attempt number).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from arq.constants import in_progress_key_prefix
from redis.asyncio import Redis

from app.engine.jobs import activity_job
from tests.engine.crash_support import CrashLab, assert_pipeline_recovered

pytestmark = pytest.mark.redis


async def test_arq_worker_killed_mid_run_is_resumed_by_a_fresh_one(
    db_url: str, tmp_path: Path, redis_url: str
) -> None:
    with CrashLab(db_url, tmp_path, redis_url=redis_url) as lab:
        run_id = lab.start("crash_pipeline", "arq-crash", {"steps": 4})
        # A sends every job through Redis, so the lost attempt is an arq job;
        # B runs as production workers do (eager follow-up jobs).
        doomed = lab.spawn("A", arq=True, dispatch_only=True, fault="activity.before_complete@2")
        fresh = lab.spawn("B", arq=True, standby=True)
        lab.wait_killed(doomed)
        assert [e.op for e in lab.record.all()] == [f"{run_id}:step-0", f"{run_id}:step-1"]
        # arq still believes the killed job is running (for its 24 h job
        # timeout); the retry must not wait for that.
        lost_job = activity_job(lab.task(run_id, ":step-1").id, attempt=1).job_id
        redis = Redis.from_url(redis_url)
        assert await redis.exists(in_progress_key_prefix + lost_job)
        await redis.aclose()

        fresh.go()
        lab.wait_settled(run_id)

        assert_pipeline_recovered(lab, run_id, steps=4, in_flight=1, lost_by="A", retried_by="B")
