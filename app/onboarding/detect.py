"""Guess a repository's setup and test commands from the files it carries.

Onboarding proposes a ``.github/repairbot.yml`` the maintainer reviews in a
pull request, so a guess only has to be a good starting point, never run
unseen. The rules follow what real projects use, most specific first:

- Python: ``tox.ini``/``pyproject.toml``/``setup.cfg``/``pytest.ini`` naming
  pytest -> ``python -m pytest``; a test extra in ``pyproject.toml`` or
  ``setup.cfg`` -> ``pip install -e '.[test]'``; ``requirements*.txt`` ->
  ``pip install -r``; otherwise ``pip install -e .`` when the project is
  installable; ``unittest`` discovery when there is a ``tests/`` folder and no
  pytest configuration.
- JavaScript: ``package.json`` with a ``test`` script -> ``npm ci`` (or
  ``npm install`` without a lockfile) and ``npm test``.
- A ``Makefile`` with a ``test:`` target -> ``make test``.
- Go (``go.mod``) -> ``go test ./...``; Rust (``Cargo.toml``) -> ``cargo test``.

The reproduction is left to the issue (a fenced ``repro`` block from a
maintainer) or to the maintainer's edit: no file says which test shows a bug.
Every value read from the repository is hostile text: nothing here runs it,
and what is written into the YAML goes through ``yaml.safe_dump``.
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The files detection reads (repository root only), each capped in size by the caller.
CANDIDATE_FILES = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "tox.ini",
    "pytest.ini",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "test-requirements.txt",
    "package.json",
    "package-lock.json",
    "Makefile",
    "go.mod",
    "Cargo.toml",
)
#: Directories whose presence matters (read from the tree listing, not their files).
CANDIDATE_DIRS = ("tests", "test")
TEST_EXTRAS = ("test", "tests", "testing", "dev")
#: A candidate file larger than this is not read (it is not a plain manifest).
MAX_CANDIDATE_BYTES = 256 * 1024
_MAKE_TEST = re.compile(r"^test\s*:", re.MULTILINE)


@dataclass(frozen=True)
class Detected:
    """What onboarding proposes, and how it was found (for the PR body)."""

    setup: list[str] = field(default_factory=list)
    test: str | None = None
    #: One line per finding, in the order they were made.
    reasons: list[str] = field(default_factory=list)
    #: Setup needs the network (dependencies from a registry).
    needs_network: bool = False


def detect(files: Mapping[str, str], dirs: frozenset[str] = frozenset()) -> Detected:
    """The commands for a repository whose root holds ``files`` (name -> text)
    and the directories ``dirs``."""
    for rule in (_python, _javascript, _make, _go, _rust):
        found = rule(files, dirs)
        if found is not None:
            return found
    return Detected(reasons=["no known build or test configuration at the repository root"])


def read_checkout(root: Path) -> tuple[dict[str, str], frozenset[str]]:
    """The candidate files of a checkout's root (name -> text) and the
    candidate directories present, for ``repairbot config init``.

    Read, never run: a symlink, a special file, an oversized or undecodable
    file is skipped (onboarding reads the same files as git objects instead).
    """
    files: dict[str, str] = {}
    for name in CANDIDATE_FILES:
        path = root / name
        try:
            if path.is_symlink() or not path.is_file():
                continue
            if path.stat().st_size > MAX_CANDIDATE_BYTES:
                continue
            files[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    dirs = frozenset(
        name for name in CANDIDATE_DIRS if (root / name).is_dir() and not (root / name).is_symlink()
    )
    return files, dirs


def render_config(found: Detected, *, trigger_label: str = "repairbot") -> str:
    """The proposed ``.github/repairbot.yml``, with comments a maintainer can follow."""
    settings: dict[str, Any] = {}
    if found.setup:
        settings["setup"] = list(found.setup)
    if found.test:
        settings["test"] = found.test
    if found.needs_network:
        settings["network"] = "setup"
    settings["trigger_label"] = trigger_label
    body = yaml.safe_dump(settings, sort_keys=False, default_flow_style=False, width=100)
    header = [
        "# repairbot's settings for this repository (proposed by its onboarding).",
        "# Every setting is described in repairbot's README,",
        '# section "Onboarding and repository settings".',
        "#",
        "# reproduce: the command that shows a bug (it must fail before the fix and",
        "#   pass after it). Add it here, or let maintainers put a fenced `repro`",
        "#   block in each issue, e.g.",
        "#   reproduce: python -m pytest tests/test_the_bug.py",
    ]
    if not found.test:
        header.append("# test: the command that runs the whole test suite (none was detected).")
    return "\n".join(header) + "\n" + body


# -- the rules ---------------------------------------------------------------------


def _python(files: Mapping[str, str], dirs: frozenset[str]) -> Detected | None:
    pyproject = _toml(files.get("pyproject.toml"))
    setup_cfg = _ini(files.get("setup.cfg"))
    tox = _ini(files.get("tox.ini"))
    python_files = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "pytest.ini")
    requirements = [name for name in files if name.endswith(".txt") and "requirements" in name]
    if not any(name in files for name in python_files) and not requirements:
        return None
    reasons: list[str] = []
    uses_pytest = (
        "pytest.ini" in files
        or _nested(pyproject, "tool", "pytest") is not None
        or setup_cfg.has_section("tool:pytest")
        or tox.has_section("pytest")
        or any("pytest" in text.lower() for name, text in files.items() if name in requirements)
    )
    installable = "setup.py" in files or _nested(pyproject, "project") is not None
    installable = installable or _nested(pyproject, "build-system") is not None
    extra = _test_extra(pyproject, setup_cfg)
    setup: list[str] = []
    if installable:
        target = f".[{extra}]" if extra else "."
        setup.append(f"python -m pip install -e '{target}'")
        reasons.append(
            f"installable Python project: `pip install -e {target}`"
            + (f" (the `{extra}` extra holds the test dependencies)" if extra else "")
        )
    for name in sorted(requirements):
        if name == "requirements.txt" or any(word in name for word in ("dev", "test")):
            setup.append(f"python -m pip install -r {name}")
            reasons.append(f"`{name}` lists dependencies")
    if uses_pytest or (extra and "pytest" in _extra_text(pyproject, setup_cfg, extra)):
        test = "python -m pytest -q"
        reasons.append("pytest is configured or required: `python -m pytest -q`")
    elif dirs & set(CANDIDATE_DIRS):
        folder = "tests" if "tests" in dirs else "test"
        test = f"python -m unittest discover -s {folder} -v"
        reasons.append(f"a `{folder}/` folder and no pytest configuration: unittest discovery")
    else:
        test = None
        reasons.append("a Python project, but no test configuration was found")
    return Detected(setup=setup, test=test, reasons=reasons, needs_network=bool(setup))


def _javascript(files: Mapping[str, str], _dirs: frozenset[str]) -> Detected | None:
    text = files.get("package.json")
    if text is None:
        return None
    try:
        package = json.loads(text)
    except ValueError:
        return Detected(reasons=["`package.json` is not valid JSON"])
    scripts = package.get("scripts") if isinstance(package, dict) else None
    test_script = scripts.get("test") if isinstance(scripts, dict) else None
    install = "npm ci" if "package-lock.json" in files else "npm install"
    reasons = [f"`package.json`: dependencies with `{install}`"]
    if not isinstance(test_script, str) or "no test specified" in test_script:
        reasons.append("`package.json` has no test script")
        return Detected(setup=[install], reasons=reasons, needs_network=True)
    reasons.append("`package.json` has a `test` script: `npm test`")
    return Detected(setup=[install], test="npm test", reasons=reasons, needs_network=True)


def _make(files: Mapping[str, str], _dirs: frozenset[str]) -> Detected | None:
    text = files.get("Makefile")
    if text is None or not _MAKE_TEST.search(text):
        return None
    return Detected(test="make test", reasons=["the `Makefile` has a `test` target"])


def _go(files: Mapping[str, str], _dirs: frozenset[str]) -> Detected | None:
    if "go.mod" not in files:
        return None
    return Detected(
        setup=["go mod download"],
        test="go test ./...",
        reasons=["a Go module: `go test ./...`"],
        needs_network=True,
    )


def _rust(files: Mapping[str, str], _dirs: frozenset[str]) -> Detected | None:
    if "Cargo.toml" not in files:
        return None
    return Detected(
        setup=["cargo fetch"],
        test="cargo test",
        reasons=["a Cargo package: `cargo test`"],
        needs_network=True,
    )


# -- reading hostile configuration files --------------------------------------------


def _toml(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}


def _ini(text: str | None) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    if text is not None:
        try:
            parser.read_string(text)
        except configparser.Error:
            return configparser.ConfigParser(interpolation=None)
    return parser


def _nested(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _test_extra(pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser) -> str | None:
    extras = _nested(pyproject, "project", "optional-dependencies")
    names = set(extras) if isinstance(extras, dict) else set()
    if setup_cfg.has_section("options.extras_require"):
        names |= set(setup_cfg.options("options.extras_require"))
    return next((name for name in TEST_EXTRAS if name in names), None)


def _extra_text(pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser, extra: str) -> str:
    listed = _nested(pyproject, "project", "optional-dependencies", extra)
    if isinstance(listed, list):
        return " ".join(str(item) for item in listed).lower()
    if setup_cfg.has_option("options.extras_require", extra):
        return setup_cfg.get("options.extras_require", extra).lower()
    return ""
