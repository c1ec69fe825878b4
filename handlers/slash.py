"""Slash commands in issue and pull-request comments: ``/repair [subcommand] [args]``.

Pure parsing, no I/O. A command counts only where a reader of the rendered
comment would see it as one: at the start of a line (at most three spaces of
indentation, as in Markdown), outside fenced code blocks (``` and ~~~),
inline code spans, HTML comments and quoted replies (``>`` lines). Lines
indented four or more spaces render as code, so they do not count either.

The verb is matched case-insensitively; extra spaces and tabs are ignored.
``/repair`` followed by a word we do not know yields :class:`UnknownSlashCommand`
so the app can answer with help instead of guessing.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from app.github.markdown import Line, visible_blocks


class Verb(enum.StrEnum):
    REPAIR = "repair"
    CANCEL = "cancel"
    RETRY = "retry"
    STATUS = "status"
    HELP = "help"


_SUBCOMMANDS = {verb.value: verb for verb in Verb if verb is not Verb.REPAIR}


@dataclass(frozen=True)
class SlashCommand:
    verb: Verb
    #: Whatever followed the subcommand on its line, whitespace-normalized.
    args: str = ""
    #: 1-based line number in the comment body.
    line: int = 1


@dataclass(frozen=True)
class UnknownSlashCommand:
    #: The subcommand as typed (lowercased), e.g. ``"cancle"``.
    word: str
    line: int = 1


ParsedCommand = SlashCommand | UnknownSlashCommand

# `/repair` as a whole word, at most three spaces in (four make a code block).
# ASCII-only case folding for the trigger: "/repaİr" (dotted capital I) is not a command.
_COMMAND_LINE = re.compile(r"[ ]{0,3}(?ai:/repair)(?:\s+(?P<rest>.*?))?\s*")
_QUOTE = re.compile(r"[ ]{0,3}>")
_ESCAPABLE = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def parse_commands(body: str) -> list[ParsedCommand]:
    """Every command in ``body``, in order of appearance."""
    commands: list[ParsedCommand] = []
    for number, line in _visible_line_starts(body):
        parsed = _parse_line(line, number)
        if parsed is not None:
            commands.append(parsed)
    return commands


def parse_command(body: str) -> ParsedCommand | None:
    """The first command in ``body``; a comment is answered once, for its first command."""
    commands = parse_commands(body)
    return commands[0] if commands else None


def _parse_line(line: str, number: int) -> ParsedCommand | None:
    match = _COMMAND_LINE.fullmatch(line)
    if match is None:
        return None
    words = (match.group("rest") or "").split()
    if not words:
        return SlashCommand(Verb.REPAIR, "", number)
    word = words[0].lower()
    verb = _SUBCOMMANDS.get(word)
    if verb is None:
        return UnknownSlashCommand(word, number)
    return SlashCommand(verb, " ".join(words[1:]), number)


def _visible_line_starts(body: str) -> list[tuple[int, str]]:
    """(line number, text) of lines whose start renders as ordinary paragraph text.

    Blocks come from :func:`app.github.markdown.visible_blocks`, the scanner the
    issue's repro block is read with too: fences and HTML comments end a
    paragraph and hide what is inside them.
    """
    visible: list[tuple[int, str]] = []
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        visible.extend(_outside_inline_spans(paragraph))
        paragraph.clear()

    for block in visible_blocks(body):
        if not isinstance(block, Line) or not block.text.strip() or _QUOTE.match(block.text):
            flush()
        else:
            paragraph.append((block.number, block.text))
    flush()
    return visible


def _outside_inline_spans(paragraph: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Drop lines that begin inside a code span or HTML comment opened on an earlier line."""
    if not paragraph:
        return []
    text = "\n".join(line for _, line in paragraph)
    hidden = _hidden_ranges(text)
    kept: list[tuple[int, str]] = []
    offset = 0
    for number, line in paragraph:
        if not any(start < offset < end for start, end in hidden):
            kept.append((number, line))
        offset += len(line) + 1
    return kept


def _hidden_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of code spans and inline HTML comments (CommonMark rules)."""
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPABLE:
            i += 2
        elif char == "`":
            run_end = _run_end(text, i)
            close = _closing_backticks(text, run_end, run_end - i)
            if close is None:
                i = run_end  # no matching run: the backticks are literal text
            else:
                ranges.append((i, close))
                i = close
        elif text.startswith("<!--", i):
            end = text.find("-->", i + 4)
            if end == -1:
                i += 4
            else:
                ranges.append((i, end + 3))
                i = end + 3
        else:
            i += 1
    return ranges


def _run_end(text: str, i: int) -> int:
    while i < len(text) and text[i] == "`":
        i += 1
    return i


def _closing_backticks(text: str, i: int, length: int) -> int | None:
    """End of the next backtick run of exactly ``length`` from ``i``, if any."""
    while i < len(text):
        if text[i] == "`":
            end = _run_end(text, i)
            if end - i == length:
                return end
            i = end
        else:
            i += 1
    return None
