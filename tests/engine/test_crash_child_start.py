"""SIGKILL around ``ctx.start_workflow``: the child starts exactly once.

The request (``child_workflow_requested``), the child's run and the
resolution (``child_workflow_started``) are written in one transaction, so a
worker killed inside it leaves none of them and one killed right after it
leaves all three; either way the next worker finishes with one child run."""

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
def test_kill_around_a_child_start_starts_exactly_one_child(
    db_url: str, tmp_path: Path, fault: str, committed: bool
) -> None:
    with CrashLab(db_url, tmp_path) as lab:
        run_id = lab.start("crash_parent", "parent-crash", {"child_id": "child-crash"})
        doomed = lab.spawn("A", fault=fault, cache_size=0)
        fresh = lab.spawn("B", standby=True)
        lab.wait_killed(doomed)

        types = [e.type for e in lab.events(run_id)]
        if committed:
            assert types == [
                ev.WORKFLOW_STARTED,
                ev.CHILD_WORKFLOW_REQUESTED,
                ev.CHILD_WORKFLOW_STARTED,
            ]
            assert lab.runs_under("child-crash") == 1
        else:  # nothing of the killed transaction is visible
            assert types == [ev.WORKFLOW_STARTED]
            assert lab.runs_under("child-crash") == 0

        fresh.go()
        parent = lab.wait_settled(run_id)
        child = lab.store.find_run("child-crash")
        assert child is not None
        lab.wait_settled(child.run_id)

        assert lab.runs_under("child-crash") == 1
        assert (parent.status, parent.result) == ("completed", {"child_run": child.run_id})
        history = lab.events(run_id)
        assert [e.type for e in history].count(ev.CHILD_WORKFLOW_REQUESTED) == 1
        assert [e.type for e in history].count(ev.CHILD_WORKFLOW_STARTED) == 1
        assert_history_sound(lab, run_id)
