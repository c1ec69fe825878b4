from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from handlers.slash import SlashCommand, UnknownSlashCommand, Verb, parse_command, parse_commands


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/repair", SlashCommand(Verb.REPAIR)),
        ("/repair cancel", SlashCommand(Verb.CANCEL)),
        ("/repair retry", SlashCommand(Verb.RETRY)),
        ("/repair status", SlashCommand(Verb.STATUS)),
        ("/repair help", SlashCommand(Verb.HELP)),
        ("  /REPAIR   Cancel  ", SlashCommand(Verb.CANCEL)),
        ("/Repair\tRETRY\t", SlashCommand(Verb.RETRY)),
        ("/repair\r\n", SlashCommand(Verb.REPAIR)),
        ("/repair retry with more context", SlashCommand(Verb.RETRY, "with more context")),
        ("Thanks!\n\n/repair status\n", SlashCommand(Verb.STATUS, line=3)),
        ("/repair cancle", UnknownSlashCommand("cancle")),
        ("/repair please", UnknownSlashCommand("please")),
    ],
)
def test_commands(body: str, expected: SlashCommand | UnknownSlashCommand) -> None:
    assert parse_command(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "please /repair this",  # not at the start of a line
        "/repairs",
        "/repair-now",
        "/repair:",
        "`/repair`",
        "\\/repair",
        "    /repair",  # four spaces: an indented code block
        "\t/repair",
        "> /repair",
        "  > /repair cancel",
        "> quoted\n> /repair",
        "```\n/repair\n```",
        "~~~python\n/repair\n~~~",
        "````\n```\n/repair\n````",  # a shorter fence does not close a longer one
        "```\n/repair",  # an unclosed fence runs to the end
        "text `code\n/repair\nstill code` text",  # a code span across lines
        "<!--\n/repair\n-->",
        "text <!-- hidden\n/repair\n--> text",
        "/repaİr",  # dotted capital I is not "i"
        "",
    ],
)
def test_not_commands(body: str) -> None:
    assert parse_commands(body) == []


def test_command_after_code_and_quotes_counts() -> None:
    body = "> /repair cancel\n\n```\n/repair retry\n```\n`x`\n/repair status"
    assert parse_commands(body) == [SlashCommand(Verb.STATUS, line=7)]


def test_all_commands_in_order() -> None:
    body = "/repair\nsome text\n/repair nope\n/repair help"
    assert parse_commands(body) == [
        SlashCommand(Verb.REPAIR, line=1),
        UnknownSlashCommand("nope", line=3),
        SlashCommand(Verb.HELP, line=4),
    ]
    assert parse_command(body) == SlashCommand(Verb.REPAIR, line=1)


# -- properties -------------------------------------------------------------------------

subcommands = st.sampled_from(["", "cancel", "retry", "status", "help"])
blanks = st.text(alphabet=" \t", max_size=3)
# Prose lines that cannot open code, quotes or comments, nor start a command.
prose = st.lists(
    st.text(alphabet=st.characters(categories=["L", "N"], include_characters=" .,!?"), max_size=30)
    .map(str.strip)
    .filter(lambda line: not line.startswith("/")),
    max_size=5,
)


def random_case(draw: st.DrawFn, word: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in word)


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[str, Verb]:
    sub = draw(subcommands)
    indent = " " * draw(st.integers(0, 3))
    line = indent + random_case(draw, "/repair")
    if sub:
        line += draw(blanks.filter(bool)) + random_case(draw, sub)
    line += draw(blanks)
    return line, Verb(sub) if sub else Verb.REPAIR


@given(command=command_lines(), before=prose, after=prose)
def test_a_command_line_is_found_among_prose(
    command: tuple[str, Verb], before: list[str], after: list[str]
) -> None:
    line, verb = command
    body = "\n".join([*before, line, *after])
    assert parse_commands(body) == [SlashCommand(verb, line=len(before) + 1)]


@given(command=command_lines(), fence=st.sampled_from(["```", "~~~", "````"]), info=prose)
def test_a_fenced_command_never_counts(
    command: tuple[str, Verb], fence: str, info: list[str]
) -> None:
    body = "\n".join([fence + (info[0] if info else ""), command[0], fence])
    assert parse_commands(body) == []


@given(command=command_lines(), before=prose)
def test_a_quoted_command_never_counts(command: tuple[str, Verb], before: list[str]) -> None:
    quoted = "\n".join("> " + line for line in [*before, command[0]])
    assert parse_commands(quoted) == []


@given(body=st.text())
def test_never_raises_and_line_endings_do_not_matter(body: str) -> None:
    assume("\r" not in body)
    found = parse_commands(body)
    assert parse_commands(body.replace("\n", "\r\n")) == found
    for item in found:
        assert isinstance(item, SlashCommand | UnknownSlashCommand)


@given(body=st.text(alphabet="/repaiRCNLSTUH `~>\n<!-\t", max_size=80))
def test_commands_only_come_from_lines_starting_with_the_trigger(body: str) -> None:
    lines = body.splitlines()
    for item in parse_commands(body):
        assert lines[item.line - 1].lstrip(" ").lower().startswith("/repair")


def test_the_help_text_issues_no_command_even_when_quoted_back() -> None:
    from app.contracts.requests import HELP

    assert parse_commands(HELP) == []
    assert parse_commands("\n".join("> " + line for line in HELP.splitlines())) == []
    assert all(f"`/repair {verb}`" in HELP for verb in ("status", "retry", "cancel", "help"))
