"""Operation markers: hidden HTML comments that tie a GitHub object to the step that made it.

Every body repairbot writes ends with ``<!-- repairbot:op=<run>:<step> key=value ... -->``.
A restarted worker reconciles by finding the marker, never by guessing from
titles or timestamps.

Forgery: every run id, step, and value is percent-encoded when rendered, so no
value can contain a space, ``=`` or ``-->`` and change how the marker parses.
Text from users that we embed in our own bodies goes through :func:`defang`,
which makes any comment opener in it inert (it still renders the same). A
marker in a comment written by somebody else is a different matter: callers
filter by author before trusting :func:`find_marked`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, unquote

_KEY = re.compile(r"[a-z][a-z0-9_]*")
_PART = r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~/-])"
_MARKER = re.compile(
    rf"<!--[ \t]*repairbot:op=(?P<run>{_PART}+):(?P<step>{_PART}+)"
    rf"(?P<fields>(?:[ \t]+[a-z][a-z0-9_]*={_PART}*)*)[ \t]*-->"
)
_FIELD = re.compile(rf"([a-z][a-z0-9_]*)=({_PART}*)")

T = TypeVar("T")


def _encode(value: str) -> str:
    # Unreserved characters and "/" (branch names) stay readable; all else is %XX.
    return quote(value, safe="/")


@dataclass(frozen=True)
class OpId:
    """Operation id: the run and the step within it that performs one effect."""

    run: str
    step: str

    def __post_init__(self) -> None:
        if not self.run or not self.step:
            raise ValueError("an operation id needs a non-empty run and step")

    @property
    def token(self) -> str:
        """Unambiguous text form, ``<run>:<step>`` percent-encoded (also the check-run
        ``external_id``)."""
        return f"{_encode(self.run)}:{_encode(self.step)}"

    @classmethod
    def from_token(cls, token: str) -> OpId:
        run, sep, step = token.partition(":")
        if not sep or ":" in step:
            raise ValueError(f"not an operation token: {token!r}")
        return cls(unquote(run), unquote(step))

    def __str__(self) -> str:
        return self.token


@dataclass(frozen=True)
class Marker:
    op: OpId
    fields: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.fields:
            if not _KEY.fullmatch(key):
                raise ValueError(f"marker key must match {_KEY.pattern}: {key!r}")

    def render(self) -> str:
        parts = [f"repairbot:op={self.op.token}"]
        parts += [f"{key}={_encode(self.fields[key])}" for key in sorted(self.fields)]
        return "<!-- " + " ".join(parts) + " -->"


def parse_markers(text: str) -> list[Marker]:
    """Every well-formed marker in ``text``, in order. Malformed ones are skipped."""
    markers: list[Marker] = []
    for match in _MARKER.finditer(text):
        pairs = _FIELD.findall(match.group("fields"))
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys):
            continue  # a repeated key is not something we render: do not guess which wins
        op = OpId(unquote(match.group("run")), unquote(match.group("step")))
        markers.append(Marker(op, {key: unquote(value) for key, value in pairs}))
    return markers


def parse_marker(text: str) -> Marker | None:
    """The marker we appended last (bodies we write end with theirs)."""
    markers = parse_markers(text)
    return markers[-1] if markers else None


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text)


#: GitHub refuses issue, comment and pull-request bodies longer than this (characters).
MAX_BODY = 65536
_TRUNCATED = "\n\n…(truncated)"


def with_marker(body: str, marker: Marker, *, limit: int = MAX_BODY) -> str:
    """``body`` with its old markers removed and ``marker`` appended on its own line.

    A body too long for GitHub is cut, never the marker: a body without its
    marker could not be found again and would be written twice.
    """
    tail = "\n\n" + marker.render()
    text = strip_markers(body).rstrip()
    if len(text) + len(tail) > limit:
        text = text[: max(0, limit - len(tail) - len(_TRUNCATED))] + _TRUNCATED
    return text + tail


def defang(untrusted: str) -> str:
    """Make user text safe to embed in a body we write: no HTML comment can start in it.

    ``&lt;`` renders as ``<``, so readers see the same text, but GitHub no longer
    treats it as the start of a hidden comment and our parser never sees a marker.
    """
    return untrusted.replace("<!--", "&lt;!--")


def _default_body(item: Any) -> str | None:
    body = getattr(item, "body", None)
    return body if isinstance(body, str) else None


def find_marked(
    items: Iterable[T],
    op: OpId,
    *,
    body: Callable[[T], str | None] = _default_body,
) -> list[T]:
    """The items whose body carries a marker for ``op``, in the order given.

    A list, not the first hit: two racing workers can both create, and the
    caller needs to see every copy to converge on one.
    """
    found: list[T] = []
    for item in items:
        text = body(item)
        if text and any(marker.op == op for marker in parse_markers(text)):
            found.append(item)
    return found
