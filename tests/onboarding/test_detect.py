"""Detection of setup and test commands from a repository's root files, and
the proposed config: it must always parse with the code runs use."""

from __future__ import annotations

import pytest

from app.onboarding.detect import Detected, detect, render_config
from app.onboarding.proposal import new_file_patch
from app.repo_config import parse_repo_config

PYPROJECT_PYTEST = """
[project]
name = "widgets"
version = "1.0"
[project.optional-dependencies]
test = ["pytest>=8", "pytest-cov"]
[tool.pytest.ini_options]
addopts = "--cov"
"""


def test_an_installable_project_with_a_test_extra_and_pytest() -> None:
    found = detect({"pyproject.toml": PYPROJECT_PYTEST}, frozenset({"tests"}))
    assert found.setup == ["python -m pip install -e '.[test]'"]
    assert found.test == "python -m pytest -q"
    assert found.needs_network


def test_pytest_configured_in_setup_cfg_or_tox_or_pytest_ini() -> None:
    for name, text in [
        ("setup.cfg", "[tool:pytest]\ntestpaths = tests\n"),
        ("tox.ini", "[pytest]\naddopts = -q\n"),
        ("pytest.ini", "[pytest]\n"),
    ]:
        assert detect({name: text}).test == "python -m pytest -q", name


def test_requirements_files_are_installed_and_name_pytest() -> None:
    found = detect({"requirements.txt": "requests\n", "requirements-dev.txt": "pytest\n"})
    assert found.setup == [
        "python -m pip install -r requirements-dev.txt",
        "python -m pip install -r requirements.txt",
    ]
    assert found.test == "python -m pytest -q"


def test_unittest_discovery_without_pytest() -> None:
    found = detect({"setup.py": "from setuptools import setup\nsetup()\n"}, frozenset({"tests"}))
    assert found.test == "python -m unittest discover -s tests -v"
    assert found.setup == ["python -m pip install -e '.'"]


@pytest.mark.parametrize(
    ("files", "setup", "test"),
    [
        (
            {"package.json": '{"scripts": {"test": "jest"}}', "package-lock.json": "{}"},
            ["npm ci"],
            "npm test",
        ),
        ({"package.json": '{"scripts": {"test": "jest"}}'}, ["npm install"], "npm test"),
        ({"Makefile": "all:\n\tcc x.c\n\ntest: all\n\t./run-tests\n"}, [], "make test"),
        ({"go.mod": "module example.com/x\n"}, ["go mod download"], "go test ./..."),
        ({"Cargo.toml": "[package]\nname = 'x'\n"}, ["cargo fetch"], "cargo test"),
    ],
)
def test_other_ecosystems(files: dict[str, str], setup: list[str], test: str) -> None:
    found = detect(files)
    assert (found.setup, found.test) == (setup, test)


def test_npms_placeholder_test_script_is_not_a_test_command() -> None:
    found = detect({"package.json": '{"scripts": {"test": "echo \\"Error: no test specified\\""}}'})
    assert found.test is None


@pytest.mark.parametrize(
    "files",
    [
        {"pyproject.toml": "[[[ not toml"},
        {"setup.cfg": "no section header"},
        {"package.json": "{not json"},
        {"package.json": "[1, 2]"},
        {"pyproject.toml": "project = 3\ntool = 'x'\n"},
    ],
)
def test_broken_files_never_raise(files: dict[str, str]) -> None:
    found = detect(files)
    assert isinstance(found, Detected)
    parse_repo_config(render_config(found))


def test_nothing_recognisable() -> None:
    found = detect({}, frozenset())
    assert found == Detected(reasons=[found.reasons[0]]) and found.test is None


@pytest.mark.parametrize(
    "found",
    [
        detect({"pyproject.toml": PYPROJECT_PYTEST}, frozenset({"tests"})),
        detect({"Makefile": "test:\n\ttrue\n"}),
        detect({}),
    ],
)
def test_the_proposed_config_parses_as_runs_parse_it(found: Detected) -> None:
    text = render_config(found, trigger_label="fix-me")
    config = parse_repo_config(text)
    assert config.trigger_label == "fix-me"
    assert (config.test is not None) == (found.test is not None)
    assert config.network == ("setup" if found.needs_network else "none")
    assert len(config.setup) == len(found.setup)


def test_the_patch_adds_exactly_the_file() -> None:
    patch = new_file_patch(".github/repairbot.yml", "a: 1\nb: 2")
    assert patch.decode().splitlines() == [
        "diff --git a/.github/repairbot.yml b/.github/repairbot.yml",
        "new file mode 100644",
        "--- /dev/null",
        "+++ b/.github/repairbot.yml",
        "@@ -0,0 +1,2 @@",
        "+a: 1",
        "+b: 2",
    ]
