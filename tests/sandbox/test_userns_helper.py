"""The unprivileged worker's namespace helper (app/sandbox/userns.py,
userns_helper.py): one process per command hands the paths over, answers
the quota's walks and hands the paths back. Built here by root, with the id
maps root writes itself (what newuidmap/newgidmap write for a worker that is
not root); tests/sandbox/test_unprivileged.py runs the real thing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app.sandbox import userns
from app.sandbox.userns import UserNamespace
from tests.sandbox.namespaces import AS_ROOT, SANDBOX_USER, root_maps

pytestmark = AS_ROOT


def test_the_paths_go_over_and_come_back_through_one_helper(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "file").write_text("x")
    ns = UserNamespace.create(SANDBOX_USER, [work], mapper=root_maps)
    assert {os.lstat(p).st_uid for p in (work, work / "file")} == {SANDBOX_USER.uid}
    # What the command leaves: a file of the sandbox user's, closed to others.
    made = work / "made"
    made.write_text("y")
    os.chown(made, SANDBOX_USER.uid, SANDBOX_USER.gid)
    made.chmod(0o000)
    used, entries, why = ns.measure([work], 1 << 40, 1000)
    assert used > 0
    assert entries == 2 and why is None
    assert ns.release() is None
    assert {os.lstat(p).st_uid for p in (work, work / "file", made)} == {0}
    assert made.stat().st_mode & 0o600 == 0o600  # the worker can read and remove it


def test_a_helper_that_does_not_answer_the_hand_back_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(userns, "_HAND_BACK_TIMEOUT", 0.2)
    silent = subprocess.Popen(
        ["sleep", "600"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    ns = UserNamespace(os.open(tmp_path, os.O_RDONLY), [tmp_path], silent)
    why = ns.release()
    assert why is not None and "no answer in 0.2 s" in why
    assert silent.poll() is not None  # killed, and reaped
