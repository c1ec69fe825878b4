"""A proposed ``.github/repairbot.yml`` from what a checkout shows: its
setup and test commands detected from pyproject.toml, tox.ini, package.json,
a Makefile, go.mod or Cargo.toml (``repairbot config init``; the onboarding
pull request proposes the same).

Repository files are read, never run: each is read with a size cap and
parsed with a data parser, and only fixed commands come out (``npm test``,
never a script's text), so nothing in the repository can choose what the
proposal runs beyond picking among these.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from app.repo_config import CONFIG_PATH

#: A manifest larger than this is not read (it is not a plain manifest).
MAX_MANIFEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Proposal:
    #: What the commands were detected from (``pyproject.toml``...); "" if nothing.
    source: str = ""
    setup: list[str] = field(default_factory=list)
    test: str | None = None
    #: The reproduction: the test command, to be narrowed to the failing test.
    reproduce: str | None = None

    def yaml(self) -> str:
        """The file's text, with comments that say what to check."""
        lines = [f"# {CONFIG_PATH}: how repairbot reproduces, repairs and verifies a bug here."]
        if self.source:
            lines.append(f"# Proposed from {self.source}; check the commands before you merge.")
        else:
            lines.append("# No build or test setup was recognised: fill in the commands.")
        if self.setup:
            lines.append("setup:")
            lines += [f"  - {_quoted(command)}" for command in self.setup]
            lines.append(
                "# Setup may fetch dependencies (only setup: nothing else gets a network)."
            )
            lines.append("network: setup")
        lines.append("# The reproduction: narrow it to the failing test, or let a maintainer")
        lines.append("# give one in the issue in a ```repro block.")
        lines.append(f"reproduce: {_quoted(self.reproduce)}" if self.reproduce else "# reproduce:")
        lines.append(f"test: {_quoted(self.test)}" if self.test else "# test:")
        return "\n".join(lines) + "\n"


def _quoted(command: str) -> str:
    return json.dumps(command)  # a JSON string is a YAML string


def _read(path: Path) -> str | None:
    """A regular file's text, or None (missing, a link, too large, not text)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _python(root: Path) -> Proposal | None:
    text = _read(root / "pyproject.toml")
    if text is None:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    extras = data.get("project", {}).get("optional-dependencies", {})
    extra = next((e for e in ("test", "tests", "dev") if e in extras), None)
    install = f"python -m pip install -e '.[{extra}]'" if extra else "python -m pip install -e ."
    return Proposal("pyproject.toml", [install], "python -m pytest -q", "python -m pytest -q -x")


def _tox(root: Path) -> Proposal | None:
    if _read(root / "tox.ini") is None:
        return None
    return Proposal("tox.ini", ["python -m pip install tox"], "tox -q", "tox -q")


def _node(root: Path) -> Proposal | None:
    text = _read(root / "package.json")
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    scripts = data.get("scripts") if isinstance(data, dict) else None
    if not isinstance(scripts, dict) or "test" not in scripts:
        return None
    install = "npm ci" if (root / "package-lock.json").is_file() else "npm install"
    return Proposal("package.json", [install], "npm test", "npm test")


_MAKE_TARGET = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\s*:(?!=)", re.MULTILINE)


def _make(root: Path) -> Proposal | None:
    text = _read(root / "Makefile")
    if text is None:
        return None
    targets = set(_MAKE_TARGET.findall(text))
    if "test" not in targets:
        return None
    setup = [f"make {t}" for t in ("install", "setup", "deps") if t in targets][:1]
    return Proposal("Makefile", setup, "make test", "make test")


def _go(root: Path) -> Proposal | None:
    if _read(root / "go.mod") is None:
        return None
    return Proposal("go.mod", ["go mod download"], "go test ./...", "go test ./...")


def _rust(root: Path) -> Proposal | None:
    if _read(root / "Cargo.toml") is None:
        return None
    return Proposal("Cargo.toml", ["cargo fetch"], "cargo test", "cargo test")


#: In this order: a Makefile's test target is taken only when no language
#: manifest says more, since it often wraps what they say.
DETECTORS = (_python, _tox, _node, _go, _rust, _make)


def propose(root: Path) -> Proposal:
    for detect in DETECTORS:
        found = detect(root)
        if found is not None:
            return found
    return Proposal()
