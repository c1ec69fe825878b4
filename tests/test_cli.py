"""The ``repairbot`` command's inspection subcommands on a real database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.main.cli import main
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


def test_operator_actions_are_recorded_with_reason_and_who(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import getpass

    from app.engine.db import make_engine
    from app.engine.store import Store

    assert main(["example", "alpha"]) == 0
    store = Store(make_engine(f"sqlite:///{data_dir / 'repairbot.db'}"))
    [old] = store.list_runs()
    capsys.readouterr()
    assert main(["runs", "retry", old.run_id, "--reason", "flaky", "--by", "ops"]) == 0
    new_id = f"{old.workflow_id}/2"
    assert f"started {new_id}" in capsys.readouterr().out
    # Twice is one new run: the first retry is still active.
    assert main(["runs", "retry", old.run_id, "--reason", "flaky", "--by", "ops"]) == 0
    assert f"started {new_id}" in capsys.readouterr().out
    new = store.find_run(new_id)
    assert new is not None and new.input == old.input
    started = store.load_events(new_id)[0].data
    assert started["operator"] == {
        "action": "retry",
        "retry_of": old.run_id,
        "reason": "flaky",
        "by": "ops",
    }
    assert main(["runs", "retry", new_id, "--reason", "again"]) == 1
    assert "cancel, terminate or resume it instead" in capsys.readouterr().err
    assert main(["runs", "resume", new_id, "--reason", "nothing parked"]) == 1
    assert main(["runs", "cancel", new_id, "--reason", "not needed"]) == 0
    assert "cancel requested" in capsys.readouterr().out
    cancel = [e.data for e in store.load_events(new_id) if e.type == "cancel_requested"]
    assert cancel == [{"reason": "not needed", "by": getpass.getuser()}]
    assert main(["runs", "terminate", new_id, "--reason", "stop now", "--by", "ops"]) == 0
    ended = store.load_events(new_id)[-1]
    assert ended.type == "workflow_terminated" and ended.data["by"] == "ops"
    assert ended.data["reason"] == "stop now"
    assert main(["runs", "terminate", new_id, "--reason", "again"]) == 1
