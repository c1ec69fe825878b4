"""bench.sandbox_commands with tiny numbers: both rows measured or saying why not.
Speed is never asserted."""

from __future__ import annotations

import pytest

from bench.sandbox_commands import main
from tests.unprivileged_user import UNAVAILABLE


def test_tiny_run_reports_both_workers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--commands", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    root = next(line for line in out.splitlines() if line.startswith("| root |"))
    assert float(root.split("|")[3]) > 0 and float(root.split("|")[4]) >= 1
    unprivileged = next(line for line in out.splitlines() if "unprivileged (Dockerfile)" in line)
    if UNAVAILABLE:
        assert "not measured" in unprivileged
    else:
        # The worker starts the namespace helper, the two id maps, the held
        # sandbox, the quota probe and the hand-back for each command.
        assert float(unprivileged.split("|")[4]) > float(root.split("|")[4])
