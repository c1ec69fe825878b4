"""``repairbot config init``: a proposed config from what a checkout shows
(issue 22, point 5's detection), always one the run's own validation accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config_check import check_config
from app.config_proposal import MAX_MANIFEST_BYTES, propose
from app.main.cli import main

PYPROJECT = '[project]\nname="x"\n[project.optional-dependencies]\ntest=["pytest"]\n'


def _valid(text: str) -> None:
    config, problems = check_config(text)
    assert config is not None, problems


@pytest.mark.parametrize(
    ("files", "source", "test", "setup"),
    [
        (
            {"pyproject.toml": PYPROJECT},
            "pyproject.toml",
            "python -m pytest -q",
            ["python -m pip install -e '.[test]'"],
        ),
        ({"tox.ini": "[tox]\n"}, "tox.ini", "tox -q", ["python -m pip install tox"]),
        (
            {
                "package.json": json.dumps({"scripts": {"test": "rm -rf / # hostile"}}),
                "package-lock.json": "{}",
            },
            "package.json",
            "npm test",
            ["npm ci"],
        ),
        (
            {"Makefile": "install:\n\tpip install .\ntest: install\n\tpytest\n"},
            "Makefile",
            "make test",
            ["make install"],
        ),
        ({"go.mod": "module x\n"}, "go.mod", "go test ./...", ["go mod download"]),
        ({"Cargo.toml": "[package]\n"}, "Cargo.toml", "cargo test", ["cargo fetch"]),
    ],
)
def test_commands_are_detected_and_the_proposal_validates(
    tmp_path: Path, files: dict[str, str], source: str, test: str, setup: list[str]
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proposal = propose(tmp_path)
    assert (proposal.source, proposal.test, proposal.setup) == (source, test, setup)
    text = proposal.yaml()
    _valid(text)
    assert "network: setup" in text
    assert "rm -rf" not in text  # a script's text never becomes a command


def test_nothing_recognised_gives_a_valid_skeleton(tmp_path: Path) -> None:
    proposal = propose(tmp_path)
    assert proposal.source == "" and proposal.test is None
    _valid(proposal.yaml())


def test_hostile_manifests_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(json.dumps({"scripts": {"test": "x"}}))
    (tmp_path / "package.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "pyproject.toml").write_text("x" * (MAX_MANIFEST_BYTES + 1))
    assert propose(tmp_path).source == ""


def test_config_init_prints_or_writes_and_never_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    assert main(["config", "init", str(tmp_path)]) == 0
    assert 'test: "go test ./..."' in capsys.readouterr().out
    assert main(["config", "init", str(tmp_path), "--write"]) == 0
    written = tmp_path / ".github" / "repairbot.yml"
    assert 'test: "go test ./..."' in written.read_text()
    assert main(["config", "check", str(tmp_path)]) == 0
    written.write_text("test: mine\n")
    assert main(["config", "init", str(tmp_path), "--write"]) == 1
    assert written.read_text() == "test: mine\n"
