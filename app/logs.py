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
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
#: The context fields, in the order they appear in a line.
FIELDS = ("run_id", "workflow", "activity", "attempt", "delivery_id")
_context: ContextVar[dict[str, Any] | None] = ContextVar("repairbot_log_context", default=None)


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


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry |= _context.get() or {}
        entry |= {k: v for k, v in vars(record).items() if k not in _RESERVED}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "INFO", *, json_lines: bool = True) -> None:
    """JSON lines on stderr (the default); ``json_lines=False`` for a person
    reading a terminal."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.Formatter.converter = time.gmtime
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
