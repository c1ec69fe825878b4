"""Fault points fire only where and when they are told to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from app.engine._faults import FaultPoints


def test_inert_without_a_spec() -> None:
    FaultPoints("").hit("activity.before_complete", "anything")


@pytest.mark.parametrize(
    ("spec", "hits", "dies"),
    [
        ("activity.before_complete", [("activity.before_complete", "a")], True),
        ("activity.before_complete:b", [("activity.before_complete", "a")], False),
        ("activity.before_complete:b", [("activity.before_complete", "b")], True),
        ("activity.before_complete@2", [("activity.before_complete", "a")], False),
        ("activity.before_complete:a@2", [("activity.before_complete", "a")] * 2, True),
        ("workflow_task.mid_commit", [("activity.before_complete", "a")], False),
    ],
)
def test_fires_on_the_named_point_detail_and_count(
    spec: str, hits: list[tuple[str, str]], dies: bool
) -> None:
    code = (
        "from app.engine._faults import FaultPoints\n"
        f"points = FaultPoints({spec!r})\n"
        f"for name, detail in {hits!r}:\n"
        "    points.hit(name, detail)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=os.getcwd())
    assert (done.returncode == -signal.SIGKILL) is dies


def test_a_stall_blocks_there_once_then_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    stalls: list[float] = []
    monkeypatch.setattr("app.engine._faults.time.sleep", stalls.append)
    points = FaultPoints("activity.before_complete:a@2+7.5")
    points.hit("activity.before_complete", "b")
    points.hit("activity.before_complete", "a")
    assert stalls == []
    points.hit("activity.before_complete", "a")
    assert stalls == [7.5]
    points.hit("activity.before_complete", "a")  # and goes on: once only, no kill
    assert stalls == [7.5]
