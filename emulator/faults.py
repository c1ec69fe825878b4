"""Fault injection: make a chosen endpoint misbehave on command.

A fault is registered against an endpoint key and fires for the next
``times`` matching requests. Endpoint keys are ``"<METHOD> <route template>"``
for REST (for example ``"PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"``)
and ``"git push"`` / ``"git fetch"`` for git smart HTTP.

Kinds:

- ``fail``: answer ``status`` with a GitHub-shaped error body, the request is not applied
  (``message`` sets GitHub's words, e.g. a 405 "Base branch was modified. Review and
  try the merge again.").
- ``delay``: sleep ``delay`` seconds, then serve normally.
- ``rate_limit``: answer 403 or 429 with ``retry-after`` or ``x-ratelimit-*`` headers.
- ``drop``: perform the request, then close the connection before the answer
  (the client sees a transport error although the mutation happened); with
  ``delay``, the answer is held that long first (REST), so the call stays in
  flight after its effect.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FaultKind = Literal["fail", "delay", "rate_limit", "drop"]


@dataclass
class Fault:
    endpoint: str
    kind: FaultKind
    times: int = 1
    status: int = 500
    delay: float = 0.0
    #: rate_limit only: "retry-after" (secondary limit) or "x-ratelimit" (primary limit).
    rate_limit_style: Literal["retry-after", "x-ratelimit"] = "retry-after"
    retry_after: int = 1
    #: fail only: the error's ``message`` (default "Injected failure").
    message: str | None = None
    id: int = 0
    fired: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FaultRegistry:
    """Thread-safe: the emulator serves REST and git from several threads."""

    _faults: list[Fault] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            fault.id = next(self._ids)
            self._faults.append(fault)
            return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, endpoint: str) -> Fault | None:
        """The fault to apply to this request, consuming one of its shots."""
        with self._lock:
            for fault in self._faults:
                if fault.endpoint == endpoint and fault.fired < fault.times:
                    fault.fired += 1
                    return fault
            return None
