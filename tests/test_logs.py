"""Log lines: ISO 8601 times, no terminal escapes, levels in any case (issue 22, point 3)."""

from __future__ import annotations

import json
import logging
import re

import pytest

from app.logs import JsonLines, LogLevelError, TextLines, parse_level

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"name": "t", "levelname": "INFO", "msg": msg, **extra})
    record.created = 1_800_000_000.5
    return record


def test_json_time_is_iso_8601_utc() -> None:
    line = json.loads(JsonLines().format(_record("hello")))
    assert line["ts"] == "2027-01-15T08:00:00.500Z"
    assert ISO.match(line["ts"])


def test_text_time_is_iso_8601_utc() -> None:
    assert TextLines().format(_record("hello")) == "2027-01-15T08:00:00.500Z INFO t: hello"


def test_json_lines_hold_no_terminal_escapes() -> None:
    # uvicorn attaches a coloured copy of its message; a message may carry escapes too.
    record = _record("\x1b[32mgreen\x1b[0m ok\x07", color_message="\x1b[1mbold\x1b[0m")
    record.detail = "\x1b]0;title\x07x"
    text = JsonLines().format(record)
    assert "\\u001b" not in text and "\x1b" not in text
    line = json.loads(text)
    assert line["msg"] == "green ok"
    assert "color_message" not in line


def test_text_lines_hold_no_terminal_escapes() -> None:
    assert "\x1b" not in TextLines().format(_record("\x1b[31mred\x1b[0m"))


@pytest.mark.parametrize("name", ["debug", "DEBUG", " Info ", "warning", "Error", "critical"])
def test_levels_in_any_case(name: str) -> None:
    assert parse_level(name) == logging.getLevelName(name.strip().upper())


def test_unknown_level_names_the_choices() -> None:
    with pytest.raises(LogLevelError, match="debug, info, warning, error, critical"):
        parse_level("verbose")
