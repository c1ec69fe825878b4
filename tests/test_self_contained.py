"""A clone in any folder, on any machine, must work: nothing tracked may point
into the developer's own machine, and the test data travels with the code."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.shared_data import WEBHOOK_EXAMPLES

ROOT = Path(__file__).resolve().parents[1]

#: Absolute paths that only exist on a developer's (or this CI's) machine.
#: ``/tmp/...`` and system paths (``/usr``, ``/proc``, ``/dev``) are fine: every
#: machine has them.
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|root|home/[\w.-]+|Users/[\w.-]+)/[\w.-]+")


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in listing.decode().split("\0") if name]


def test_no_tracked_symlink_points_outside_the_repository() -> None:
    escaping = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_symlink():
            continue
        target = (path.parent / os.readlink(path)).resolve()
        if not target.is_relative_to(ROOT.resolve()):
            escaping.append(f"{name} -> {os.readlink(path)}")
    assert escaping == []


def test_no_tracked_file_names_a_path_of_the_developers_machine() -> None:
    found = []
    for name in tracked_files():
        # Recorded histories too: tests/engine/history_paths.py takes a
        # recording machine's folder out of one (and re-hashes what it changes).
        path = ROOT / name
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{name}:{lineno}: {line.strip()[:120]}")
    assert found == []


def test_the_machine_path_pattern_catches_what_it_should() -> None:
    """The scan above is only as good as its pattern: pin what it sees."""
    # Built from parts, so this file itself names no machine's folder.
    for top in ("work", "root", "home/alice", "Users/alice"):
        assert MACHINE_PATH.search(f"cd /{top}/checkout/.venv/bin")
    assert not MACHINE_PATH.search("tmp = /tmp/ws-1/repo")
    assert not MACHINE_PATH.search("https://github.com/work/repairbot")


def test_the_webhook_payloads_are_in_the_repository() -> None:
    labeled = WEBHOOK_EXAMPLES / "issues" / "labeled.json"
    assert labeled.is_file()
    assert WEBHOOK_EXAMPLES.is_relative_to(ROOT)


def test_the_payload_copy_matches_the_shared_set_when_it_is_in_reach() -> None:
    shared = ROOT.parent / "shared" / "data" / "github" / "webhooks"
    if not shared.is_dir():
        pytest.skip("no shared folder beside this checkout: the copy is the only set")
    mine = sorted(
        p.relative_to(WEBHOOK_EXAMPLES) for p in WEBHOOK_EXAMPLES.rglob("*") if p.is_file()
    )
    theirs = sorted(p.relative_to(shared) for p in shared.rglob("*") if p.is_file())
    assert mine == theirs
    differing = [
        str(rel)
        for rel in mine
        if not filecmp.cmp(WEBHOOK_EXAMPLES / rel, shared / rel, shallow=False)
    ]
    assert differing == []
