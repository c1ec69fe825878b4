"""The ``repairbot`` command's inspection subcommands on a real database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.migrate import upgrade


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPAIRBOT_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return tmp_path


def test_example_then_runs_list_show_export(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["example", "alpha", "beta"]) == 0
    assert main(["runs", "list"]) == 0
    listing = capsys.readouterr().out
    assert "example.survey@1" in listing and "completed" in listing
    run_id = next(line.split()[0] for line in listing.splitlines() if "example.survey" in line)
    assert main(["runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert "activity_scheduled" in shown and "attempts:" in shown and "total_length" in shown
    assert main(["runs", "export", run_id]) == 0
    assert '"format": "repairbot-history/1"' in capsys.readouterr().out


def test_unknown_run_is_a_clear_error(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    assert main(["runs", "show", "nope"]) == 1
    assert "no run or workflow id 'nope'" in capsys.readouterr().err


def test_bad_configuration_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REPAIRBOT_CONCURRENCY", "lots")
    assert main(["runs", "list"]) == 2
    assert "REPAIRBOT_CONCURRENCY must be an integer" in capsys.readouterr().err


def test_deliveries_list_and_retry_unknown(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    assert main(["deliveries", "list"]) == 0
    assert "no deliveries" in capsys.readouterr().out
    assert main(["deliveries", "retry", "missing"]) == 1
    assert "no delivery missing" in capsys.readouterr().out
