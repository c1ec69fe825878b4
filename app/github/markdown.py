"""What of a Markdown text a reader of the rendered page sees, block by block.

One scanner for everything repairbot reads from issue and comment text (slash
commands, ``repro`` blocks), so they agree on what counts. It follows
CommonMark as GitHub renders it, as far as repairbot needs:

- fenced code blocks (three or more backticks or tildes, indented at most
  three spaces, closed by a fence of the same character at least as long,
  or by the end of the text) come out as :class:`Fence`;
- an HTML comment block (a line starting with ``<!--``, up to the line
  holding ``-->``) is not rendered: it is dropped, fences inside it included;
- every other line comes out as a :class:`Line`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_HTML_COMMENT_START = re.compile(r"[ ]{0,3}<!--")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Fence:
    #: The info string (``repro``, ``python``...), stripped.
    info: str
    content: str
    #: 1-based line number of the opening fence.
    line: int


@dataclass(frozen=True)
class Line:
    number: int
    text: str


Block = Fence | Line


def split_lines(text: str) -> list[str]:
    return _LINE_BREAK.split(text)


def visible_blocks(text: str) -> list[Block]:
    """The fences and lines a reader sees, in order (HTML comments dropped)."""
    lines = split_lines(text)
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE.fullmatch(line)
        if opening is not None and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            start = index
            index, content = _fenced(lines, index + 1, opening["fence"], len(opening["indent"]))
            blocks.append(Fence(opening["info"].strip(), content, start + 1))
            continue
        if _HTML_COMMENT_START.match(line):
            index = _skip_html_comment(lines, index)
            continue
        blocks.append(Line(index + 1, line))
        index += 1
    return blocks


def fences(text: str) -> list[Fence]:
    return [block for block in visible_blocks(text) if isinstance(block, Fence)]


def _fenced(lines: list[str], index: int, fence: str, indent: int) -> tuple[int, str]:
    """(index after the block, its content); an unclosed fence runs to the end."""
    content: list[str] = []
    while index < len(lines):
        line = lines[index]
        index += 1
        if _closes(line, fence):
            break
        removable = len(line) - len(line.lstrip(" "))
        content.append(line[min(indent, removable) :])
    return index, "\n".join(content)


def _closes(line: str, fence: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and not stripped[run:].strip(" \t")


def _skip_html_comment(lines: list[str], index: int) -> int:
    """Index of the first line after an HTML comment block starting at ``index``."""
    start = lines[index].index("<!--") + 4
    if "-->" in lines[index][start:]:
        return index + 1
    index += 1
    while index < len(lines):
        if "-->" in lines[index]:
            return index + 1
        index += 1
    return index


def code_block(text: str, info: str = "text") -> str:
    """``text`` as a fenced code block that nothing inside it can close (its
    fence is longer than any run of backticks in the text)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"
