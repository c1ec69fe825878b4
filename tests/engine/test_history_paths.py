"""The tool that takes a machine's folder out of a recorded history: the
history still replays, and it never papers over a real difference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine._history import replay_recorded
from tests.engine.history_paths import rehash, replaced
from tests.engine.test_replay_harness import current_registry

HISTORY = Path(__file__).parent.parent / "histories" / "repair_v2_merged.json"


def test_a_moved_folder_replays_once_its_hashes_are_taken_from_the_code() -> None:
    history = json.loads(HISTORY.read_text())
    assert "/srv/repairbot" in HISTORY.read_text()
    history["events"] = replaced(history["events"], "/srv/repairbot", "/opt/elsewhere")
    registry = current_registry()
    assert not replay_recorded(history, registry).ok  # the derived inputs changed
    assert rehash(history, registry) > 0
    report = replay_recorded(history, registry)
    assert report.ok, report.problem


def test_any_other_difference_stops_it() -> None:
    history = json.loads(HISTORY.read_text())
    [first] = [e for e in history["events"] if e["type"] == "activity_scheduled"][:1]
    first["data"]["activity"] = "github.something_else"
    with pytest.raises(SystemExit, match="more than an input hash differs"):
        rehash(history, current_registry())
