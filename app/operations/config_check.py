"""``repairbot config check``: a repository's ``.github/repairbot.yml`` judged
by the very code a run uses (:func:`app.repo_config.parse_repo_config`), each
problem with the line it is on.

The run's messages name fields (``budgets.repair_attempts``); this module
only adds where in the file each one is, read from the YAML's own positions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from app.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, parse_repo_config

_FIELD_LINE = re.compile(r"^- `(?P<field>[^`]+)`: (?P<message>.*)$")
_YAML_LINE = re.compile(r"line (?P<line>\d+), column \d+")


@dataclass(frozen=True)
class Problem:
    #: 1-based line in the file; None when the problem is the file as a whole.
    line: int | None
    #: The setting, dotted (``budgets.repair_attempts``); None for the file.
    field: str | None
    message: str

    def render(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line is not None else path
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


def check_config(text: str) -> tuple[RepoConfig | None, list[Problem]]:
    """The parsed config, or None and its problems."""
    try:
        return parse_repo_config(text), []
    except RepoConfigError as exc:
        return None, problems_of(str(exc), text)


def problems_of(message: str, text: str) -> list[Problem]:
    """Split the run's message into problems and find each one's line."""
    listed = [m for m in map(_FIELD_LINE.match, message.splitlines()) if m is not None]
    if not listed:
        found = _YAML_LINE.search(message)
        return [Problem(int(found["line"]) if found else None, None, message)]
    lines = key_lines(text)
    problems = []
    for match in listed:
        field = match["field"]
        problems.append(Problem(_line_for(field, lines), field, match["message"]))
    return problems


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each key (and list item) of the document starts, by path."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    found: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, str(key.value))
                found[here] = key.start_mark.line + 1
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                here = (*path, str(index))
                found[here] = item.start_mark.line + 1
                walk(item, here)

    if root is not None:
        walk(root, ())
    return found


def _line_for(field: str, lines: dict[tuple[str, ...], int]) -> int | None:
    """The line of ``field``, or of its nearest ancestor present in the file
    (a missing setting is reported where its parent is)."""
    path = tuple(field.split("."))
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def summary(config: RepoConfig) -> str:
    """What a valid config sets, in one line."""
    wanted = [name for name in ("setup", "reproduce", "test") if getattr(config, name, None)]
    said = ", ".join(wanted) if wanted else "no commands (defaults only)"
    return f"{CONFIG_PATH} is valid: {said}"
