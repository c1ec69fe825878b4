"""``repairbot config init``: the onboarding pull request's detection, run on
a checkout; what it proposes always passes the run's own validation, and the
checkout's files are read, never followed or run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.main.cli import main
from app.onboarding.detect import MAX_CANDIDATE_BYTES, detect, read_checkout, render_config
from app.operations.config_check import check_config


def test_a_scripts_text_never_becomes_a_command(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "rm -rf / # x"}}))
    text = render_config(detect(*read_checkout(tmp_path)))
    assert "npm test" in text and "rm -rf" not in text
    config, problems = check_config(text)
    assert config is not None, problems


def test_hostile_files_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(json.dumps({"scripts": {"test": "x"}}))
    (tmp_path / "package.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "pyproject.toml").write_text("x" * (MAX_CANDIDATE_BYTES + 1))
    (tmp_path / "tests").symlink_to(tmp_path)
    files, dirs = read_checkout(tmp_path)
    assert files == {} and dirs == frozenset()


def test_config_init_prints_or_writes_and_never_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    assert main(["config", "init", str(tmp_path)]) == 0
    assert "test: go test ./..." in capsys.readouterr().out
    assert main(["config", "init", str(tmp_path), "--write"]) == 0
    written = tmp_path / ".github" / "repairbot.yml"
    assert "test: go test ./..." in written.read_text()
    assert main(["config", "check", str(tmp_path)]) == 0
    written.write_text("test: mine\n")
    assert main(["config", "init", str(tmp_path), "--write"]) == 1
    assert written.read_text() == "test: mine\n"
