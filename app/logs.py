"""Operational logs as JSON lines (one of the four records; never history).

Every line is one JSON object. Besides the message it carries the context of
the work in progress (run id, workflow, activity, attempt, delivery id), held
in context variables: set once with :func:`log_context` where the work
starts, it reaches every log call beneath, across ``await`` and
``asyncio.to_thread``, without being passed around.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
#: Extras libraries attach for their own coloured consoles (uvicorn's
#: ``color_message``): terminal escapes that have no place in a JSON line.
_DROPPED = {"color_message"}
#: The context fields, in the order they appear in a line.
FIELDS = ("run_id", "workflow", "activity", "attempt", "delivery_id")
#: The names ``--log-level`` and ``REPAIRBOT_LOG_LEVEL`` accept, in any case.
LEVELS = ("debug", "info", "warning", "error", "critical")
#: ANSI/VT100 escape sequences (colours, cursor moves) and other C0 controls but
#: tab and newline: a message or a field must not steer the reader's terminal.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")
_context: ContextVar[dict[str, Any] | None] = ContextVar("repairbot_log_context", default=None)


class LogLevelError(ValueError):
    """A log level that is not one of :data:`LEVELS`."""


def parse_level(raw: str) -> int:
    """``"debug"``, ``"INFO"``, ... -> the logging module's number."""
    name = raw.strip().lower()
    if name not in LEVELS:
        raise LogLevelError(f"log level must be one of {', '.join(LEVELS)}; got {raw!r}")
    return int(logging.getLevelName(name.upper()))


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` (None values are left out) to every log line within."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields: {sorted(unknown)}")
    merged = {**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: Any) -> None:
    """Replace the context outright, for the top of a job on a long-lived task
    (the next job rebinds, so nothing of the previous one lingers)."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields: {sorted(unknown)}")
    _context.set({k: v for k, v in fields.items() if v is not None})


def iso_time(created: float) -> str:
    """ISO 8601 in UTC with milliseconds: ``2026-12-02T00:41:16.123Z``."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def plain(text: str) -> str:
    """``text`` without terminal escape sequences."""
    return _ESCAPES.sub("", text)


def _clean(value: Any) -> Any:
    return plain(value) if isinstance(value, str) else value


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": plain(record.getMessage()),
        }
        entry |= _context.get() or {}
        entry |= {
            k: _clean(v)
            for k, v in vars(record).items()
            if k not in _RESERVED and k not in _DROPPED
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextLines(logging.Formatter):
    """For a person at a terminal: ISO time, level, logger, message."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{iso_time(record.created)} {record.levelname} {record.name}: "
        line += plain(record.getMessage())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(level: str | int = "INFO", *, json_lines: bool = True) -> None:
    """JSON lines on stderr (the default); ``json_lines=False`` for a person
    reading a terminal. ``level``: a name in any case, or a number."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else TextLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(parse_level(level) if isinstance(level, str) else level)
