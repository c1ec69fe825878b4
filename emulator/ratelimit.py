"""Primary rate-limit accounting: the ``x-ratelimit-*`` headers and ``/rate_limit``.

Counts requests per principal in hourly windows, as GitHub does, but never
refuses on its own: refusals are a fault to inject (``rate_limit``), so tests
decide when they happen. A conditional GET answered ``304 Not Modified`` is not
counted (``refund``), as on GitHub.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.auth import Principal

WINDOW = 3600


class RateCounter:
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._used: dict[str, tuple[int, int]] = {}

    @staticmethod
    def limit_for(principal: Principal) -> int:
        return 60 if principal.kind == "anonymous" else 5000

    def _window(self, label: str) -> tuple[int, int]:
        start = int(self._now()) // WINDOW * WINDOW
        window, used = self._used.get(label, (start, 0))
        return (start, 0) if window != start else (window, used)

    def count(self, principal: Principal) -> dict[str, str]:
        window, used = self._window(principal.label)
        used += 1
        self._used[principal.label] = (window, used)
        return self.headers(principal)

    def reset(self) -> None:
        """Forget every count, as if a new window had begun for everyone (a
        benchmark that compresses days of requests into minutes of wall time)."""
        self._used.clear()

    def refund(self, principal: Principal) -> dict[str, str]:
        """Take back the request just counted (a ``304 Not Modified``: GitHub
        does not count a conditional request it answers so); the headers
        after it."""
        window, used = self._window(principal.label)
        self._used[principal.label] = (window, max(0, used - 1))
        return self.headers(principal)

    def headers(self, principal: Principal) -> dict[str, str]:
        window, used = self._window(principal.label)
        limit = self.limit_for(principal)
        return {
            "x-ratelimit-limit": str(limit),
            "x-ratelimit-remaining": str(max(0, limit - used)),
            "x-ratelimit-used": str(used),
            "x-ratelimit-reset": str(window + WINDOW),
            "x-ratelimit-resource": "core",
        }

    def overview(self, principal: Principal) -> dict[str, Any]:
        window, used = self._window(principal.label)
        limit = self.limit_for(principal)
        core = {
            "limit": limit,
            "used": used,
            "remaining": max(0, limit - used),
            "reset": window + WINDOW,
        }
        search = {"limit": 30, "used": 0, "remaining": 30, "reset": window + 60}
        return {
            "resources": {
                "core": core,
                "search": search,
                "graphql": {**core, "used": 0, "remaining": limit},
                "integration_manifest": {
                    "limit": 5000,
                    "used": 0,
                    "remaining": 5000,
                    "reset": window + WINDOW,
                },
                "code_search": {"limit": 10, "used": 0, "remaining": 10, "reset": window + 60},
            },
            "rate": core,
        }
