"""The README renders: every table is a table (GitHub-flavoured Markdown's
rules), the commands it lists exist, and no paragraph is pasted twice."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.github.markdown import Line, visible_blocks
from app.main.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_DELIMITER_CELL = re.compile(r"\s*:?-+:?\s*")


def cells(row: str) -> list[str]:
    """A table row's cells: split on pipes not escaped with a backslash (GFM
    splits inside code spans too), outer pipes optional."""
    text = row.strip()
    text = text.removeprefix("|")
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", text)]


def is_delimiter(row: str) -> bool:
    return "-" in row and all(_DELIMITER_CELL.fullmatch(c) for c in cells(row))


@dataclass
class Table:
    line: int
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)


def tables_and_strays(text: str) -> tuple[list[Table], list[tuple[int, str]]]:
    """The tables GitHub renders, and the pipe-led lines it would show as plain
    text (a row cut off from its table by a blank line, a table without its
    delimiter row)."""
    lines = [b for b in visible_blocks(text) if isinstance(b, Line)]
    tables: list[Table] = []
    strays: list[tuple[int, str]] = []
    current: Table | None = None
    previous = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        nxt = lines[index + 1] if index + 1 < len(lines) else None
        adjacent = nxt is not None and nxt.number == line.number + 1
        if current is not None and line.text.strip() and line.number == previous + 1:
            current.rows.append(cells(line.text))
        elif "|" in line.text and adjacent and nxt is not None and is_delimiter(nxt.text):
            current = Table(line.number, cells(line.text))
            tables.append(current)
            index += 1  # the delimiter row
            line = nxt
        else:
            current = None
            if line.text.lstrip().startswith("|"):
                strays.append((line.number, line.text))
        previous = line.number
        index += 1
    return tables, strays


def test_the_reader_finds_a_table_broken_by_a_blank_line() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n"
    tables, strays = tables_and_strays(text)
    assert [t.rows for t in tables] == [[["1", "2"]]]
    assert strays == [(5, "| 3 | 4 |")]


def test_the_reader_keeps_escaped_pipes_and_skips_code_fences() -> None:
    text = "```\n| not | a table |\n```\n| a | b |\n|---|:-:|\n| `x\\|y` | 2 |\n"
    tables, strays = tables_and_strays(text)
    assert strays == []
    assert tables[0].rows == [["`x\\|y`", "2"]]


def test_readme_tables_render_whole() -> None:
    tables, strays = tables_and_strays(README.read_text())
    assert strays == [], f"table rows GitHub shows as text (a blank line inside a table?): {strays}"
    assert len(tables) >= 4
    for table in tables:
        for row in table.rows:
            assert len(row) == len(table.header), f"line {table.line}: {row} vs {table.header}"


def test_readme_has_no_paragraph_twice() -> None:
    paragraphs = [" ".join(p.split()) for p in README.read_text().split("\n\n")]
    sentences = [
        s
        for p in paragraphs
        if not p.startswith(("|", "```", "#"))
        for s in re.split(r"(?<=[.:])\s+", p)
        if len(s) > 60
    ]
    repeated = {s for s in sentences if sentences.count(s) > 1}
    assert not repeated, repeated


def _command_table() -> Table:
    tables, _ = tables_and_strays(README.read_text())
    return next(t for t in tables if t.header[0] == "command")


def test_every_command_in_the_readme_exists_and_every_command_is_in_it() -> None:
    _parser, handlers = build_parser()
    listed = set()
    for row in _command_table().rows:
        for usage in re.findall(r"`repairbot ([a-z][a-z ]*?)(?: [\[<A-Z-]|`)", row[0]):
            listed.add(usage.strip())
    leaves = {k for k in handlers if not any(o.startswith(k + " ") for o in handlers)}
    assert listed <= set(handlers), listed - set(handlers)
    assert leaves <= listed, f"commands missing from the README: {sorted(leaves - listed)}"


@pytest.mark.parametrize("command", ["status", "retry", "cancel", "help"])
def test_readme_documents_the_slash_commands(command: str) -> None:
    assert f"`/repair {command}`" in README.read_text()
