"""SIGKILL around ``ctx.start_run``: the command, the run it starts and its
answer (``run_command_answered``) share one transaction, so a worker killed
inside it leaves none of them and one killed right after leaves all three;
either way the next worker finishes with exactly one started run. Cancel
and describe are carried out the same way (``_store/run_commands.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import _history_commands as ev
from tests.engine.crash_support import CrashLab, assert_history_sound


@pytest.mark.parametrize(
    ("fault", "committed"),
    [("workflow_task.mid_commit@1", False), ("workflow_task.after_commit@1", True)],
    ids=["inside-the-commit", "after-the-commit"],
)
def test_kill_around_a_start_run_starts_exactly_one_run(
    db_url: str, tmp_path: Path, fault: str, committed: bool
) -> None:
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_starter", "starter-crash", {"child_id": "started-crash"})
        doomed = lab.spawn("A", fault=fault, cache_size=0)
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        types = [e.type for e in lab.events(run_id)]
        if committed:
            assert types == [
                ev.WORKFLOW_STARTED,
                ev.RUN_START_REQUESTED,
                ev.RUN_COMMAND_ANSWERED,
            ]
            assert lab.runs_under("started-crash") == 1
        else:  # nothing of the killed transaction is visible
            assert types == [ev.WORKFLOW_STARTED]
            assert lab.runs_under("started-crash") == 0

        fresh.go()
        starter = lab.wait_settled(run_id)
        started = lab.store.find_run("started-crash")
        assert started is not None
        lab.wait_settled(started.run_id)

        assert lab.runs_under("started-crash") == 1
        assert (starter.status, starter.result) == (
            "completed",
            {"run_id": started.run_id, "created": True},
        )
        history = [e.type for e in lab.events(run_id)]
        assert history.count(ev.RUN_START_REQUESTED) == 1
        assert history.count(ev.RUN_COMMAND_ANSWERED) == 1
        assert_history_sound(lab, run_id)
