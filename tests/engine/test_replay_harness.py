"""Every recorded history in tests/histories/ replays against the current code.

A change to a workflow that would break runs in flight fails here, in CI,
not in production. The test also shows the harness catching an unguarded
change and ``patched()`` making the same change safe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.engine._history import replay_recorded
from app.engine._registry import Registry
from app.main.catalog import build_registry
from tests.engine import replay_workflows

HISTORIES = sorted((Path(__file__).parent.parent / "histories").glob("*.json"))


def current_registry() -> Registry:
    """The product's workflows plus the test workflows with recorded histories."""
    registry = build_registry()
    for defn in replay_workflows.REGISTRY.workflows.values():
        registry.add_workflow(defn)
    return registry


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_there_are_recorded_histories() -> None:
    assert len(HISTORIES) >= 2


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_recorded_history_replays_on_current_code(path: Path) -> None:
    report = replay_recorded(load(path), current_registry())
    assert report.ok, report.problem
    assert report.new_commands == [], "a finished run must not issue new commands on replay"


def test_harness_catches_an_unguarded_change() -> None:
    history = load(Path(__file__).parent.parent / "histories" / "greet_v1_before_audit.json")
    report = replay_recorded(
        history, current_registry(), defn=replay_workflows.greet_changed_unsafely
    )
    assert not report.ok
    assert report.problem is not None
    assert "non-deterministic workflow at command 1" in report.problem
    assert "'activity': 'lookup'" in report.problem and "'activity': 'audit'" in report.problem


def test_patched_takes_the_old_path_for_old_runs_and_the_new_path_for_new() -> None:
    registry = current_registry()
    old = replay_recorded(load(HISTORIES[1]), registry)
    new = replay_recorded(load(HISTORIES[0]), registry)
    assert old.ok and new.ok
    audited = [
        e
        for e in load(HISTORIES[0])["events"]
        if e["type"] == "activity_scheduled" and e["data"]["activity"] == "audit"
    ]
    assert len(audited) == 1  # the run recorded after the change took the new path
