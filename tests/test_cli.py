"""The ``repairbot`` command's inspection subcommands on a real database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.main.cli import main
from app.operations.migrate import upgrade


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
    assert "example.survey@2" in listing and "completed" in listing
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

    from app.engine._db import make_engine
    from app.engine._store import Store

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


# -- one clear line, fail fast (issue 22, point 2) ------------------------------


def _one_line(text: str) -> str:
    """The whole of ``text``, asserted to be a single line without a traceback."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    from app.version import package_version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"repairbot {package_version()}"


@pytest.mark.parametrize("given", ["debug", "DEBUG", "Info", "warning"])
def test_log_level_in_any_case(
    data_dir: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    assert main(["--log-level", given, "runs", "list"]) == 0
    assert "no runs" in capsys.readouterr().out


def test_log_level_from_the_environment(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    monkeypatch.setenv("REPAIRBOT_LOG_LEVEL", "error")
    assert main(["runs", "list"]) == 0
    assert logging.getLogger().level == logging.ERROR
    monkeypatch.setenv("REPAIRBOT_LOG_LEVEL", "loud")
    assert main(["runs", "list"]) == 2
    assert "log level must be one of" in _one_line(capsys.readouterr().err)


def test_malformed_database_url_is_one_line(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", "not a url with secret-pw")
    assert main(["runs", "list"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "DATABASE_URL is not a database URL" in line and "secret-pw" not in line


def test_unreachable_database_is_one_line_without_its_password(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("DATABASE_URL", f"postgresql://u:secret-pw@127.0.0.1:{port}/x")
    assert main(["tokens", "list"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "cannot reach the database at postgresql://u:***@127.0.0.1" in line
    assert "secret-pw" not in line


@pytest.mark.parametrize("command", [["migrate"], ["example"]])
def test_commands_that_migrate_name_an_unreachable_database(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("DATABASE_URL", f"postgresql://u@127.0.0.1:{port}/x")
    assert main(command) == 1
    assert "cannot reach the database at postgresql://u@127.0.0.1" in _one_line(
        capsys.readouterr().err
    )


@pytest.mark.parametrize("command", [["runs", "list"], ["deliveries", "list"], ["worker"]])
def test_unmigrated_database_is_one_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main(command) == 1
    line = _one_line(capsys.readouterr().err)
    assert "has no schema" in line and "run `repairbot migrate`" in line


def test_database_from_a_newer_version_is_named(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy import text

    from app.engine._db import make_engine

    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    with make_engine(f"sqlite:///{data_dir / 'repairbot.db'}").begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    assert main(["runs", "list"]) == 1
    assert "a newer repairbot migrated it" in _one_line(capsys.readouterr().err)


def test_web_without_a_webhook_secret_refuses_to_start(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    # The port is taken: were the secret not checked first, the command would
    # still end (on the port), with another line.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for command in ("web", "serve"):
            assert main([command, "--port", port]) == 1
            assert "GITHUB_WEBHOOK_SECRET is not set" in _one_line(capsys.readouterr().err)


def test_bad_private_key_is_one_line(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The database is not migrated either: the key is checked first, and were
    # it not, the command would end on the schema with another line.
    monkeypatch.setenv("GITHUB_APP_ID", "1")
    monkeypatch.setenv("GITHUB_PRIVATE_KEY", "-----BEGIN RSA PRIVATE KEY-----\nnope\n")
    assert main(["worker"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "not a PEM private key" in line and "nope" not in line


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str], port: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["web", "--port", port])
    assert exited.value.code == 2
    assert "argument --port" in capsys.readouterr().err


def test_port_in_use_is_one_line(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["web", "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in _one_line(
        capsys.readouterr().err
    )


def test_an_unexpected_error_is_one_line_unless_debugging(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.main import cli

    def broken(args: object, settings: object) -> int:
        raise RuntimeError("disk on fire\nsecond line")

    upgrade(f"sqlite:///{data_dir / 'repairbot.db'}")
    monkeypatch.setattr(cli, "cmd_runs_list", broken)
    assert main(["runs", "list"]) == 1
    assert _one_line(capsys.readouterr().err) == (
        "repairbot runs list: RuntimeError: disk on fire (--debug prints the traceback)"
    )
    with pytest.raises(RuntimeError):
        main(["--debug", "runs", "list"])


def test_migrate_does_not_print_the_database_password(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.main import cli

    monkeypatch.setattr(cli, "upgrade", lambda url: None)
    monkeypatch.setattr("app.main.preflight.schema_revisions", lambda s: (None, "x", {"x"}))
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:secret-pw@db/x")
    assert main(["migrate"]) == 0
    assert "secret-pw" not in capsys.readouterr().out


# -- help, choices, whole output (issue 22, point 10) ----------------------------


def test_every_command_names_the_environment_it_reads_and_every_option_has_help() -> None:
    import argparse

    from app.main.cli import ENVIRONMENT, build_parser, leaf_parsers

    parser, _handlers = build_parser()
    leaves = leaf_parsers(parser)
    assert set(leaves) == set(ENVIRONMENT)
    for key, child in leaves.items():
        assert "environment:" in child.format_help(), key
        for action in child._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"repairbot {key}: {action.dest} has no help"
    assert "DATABASE_URL" in leaves["runs list"].format_help()
    assert "GITHUB_WEBHOOK_SECRET (required)" in leaves["web"].format_help()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help, action.dest


def test_runs_list_with_an_unknown_status_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["runs", "list", "--status", "bogus"])
    assert exited.value.code == 2
    assert "argument --status: invalid choice: 'bogus'" in capsys.readouterr().err


def test_runs_show_never_cuts_json(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    long_item = "x" * 400
    assert main(["example", long_item]) == 0
    capsys.readouterr()
    assert main(["runs", "list"]) == 0
    run_id = next(
        line.split()[0] for line in capsys.readouterr().out.splitlines() if "example" in line
    )
    assert main(["runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    history = shown.split("\nhistory:\n", 1)[1].split("\n\n", 1)[0]
    for line in history.splitlines():
        json.loads(line.split(None, 2)[2])  # every event's data parses whole
    assert long_item in history


def test_runs_watch_on_a_finished_run_shows_when_things_happened(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    from datetime import UTC, datetime

    from app.engine._db import make_engine
    from app.engine._store import Store

    assert main(["example", "alpha"]) == 0
    store = Store(make_engine(f"sqlite:///{data_dir / 'repairbot.db'}"))
    [run] = store.list_runs()
    with store.engine.begin() as conn:  # as if it all happened on a day long past
        from sqlalchemy import text

        conn.execute(text("UPDATE history_events SET created_at = 86400 + seq"))
        conn.execute(text("UPDATE workflow_runs SET created_at = 86400, closed_at = 86499"))
    capsys.readouterr()
    assert main(["runs", "watch", run.run_id]) == 0
    out = capsys.readouterr().out
    assert "started 1970-01-02 00:00:00 UTC" in out
    event_times = re.findall(r"^(\d\d:\d\d:\d\d)\s+\d+\s", out, re.M)
    assert event_times and set(event_times) <= {
        datetime.fromtimestamp(86400 + n, UTC).strftime("%H:%M:%S") for n in range(60)
    }
    assert out.rstrip().endswith("00:01:39  run completed: completed")


def test_dev_refuses_a_proxy_url_that_is_not_http(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    assert main(["dev", "--port", "1", "--webhook-proxy", "file:///etc/passwd"]) == 2
    assert "must be http(s)://host/" in _one_line(capsys.readouterr().err)


# -- repairbot config check (issue 22, point 6) ----------------------------------


def test_config_check_accepts_a_valid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "repairbot.yml").write_text("reproduce: pytest -x\ntest: pytest\n")
    assert main(["config", "check", str(tmp_path)]) == 0
    assert "is valid: reproduce, test" in capsys.readouterr().out


def test_config_check_names_line_and_field_of_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "repairbot.yml"
    path.write_text("test: pytest\nbudgets:\n  repair_attempts: lots\nmerge_methd: squash\n")
    assert main(["config", "check", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}:3: budgets.repair_attempts: ")
    assert out[1] == f"{path}:4: merge_methd: unknown setting (check the spelling)"


def test_config_check_uses_the_runs_own_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.operations import config_check
    from app.repo_config import RepoConfigError

    def refuse(text: str) -> None:
        raise RepoConfigError("- `test`: refused by the run's parser")

    monkeypatch.setattr(config_check, "parse_repo_config", refuse)
    path = tmp_path / "repairbot.yml"
    path.write_text("test: pytest\n")
    assert main(["config", "check", str(path)]) == 1
    assert capsys.readouterr().out.strip() == f"{path}:1: test: refused by the run's parser"


def test_config_check_bad_yaml_and_missing_file_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "repairbot.yml"
    path.write_text("test: [pytest\n")
    assert main(["config", "check", str(path)]) == 1
    assert _one_line(capsys.readouterr().out).startswith(f"{path}:2: ")
    assert main(["config", "check", str(tmp_path / "nope.yml")]) == 2
    assert "cannot read" in _one_line(capsys.readouterr().err)
