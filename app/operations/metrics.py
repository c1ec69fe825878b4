"""Prometheus metrics, in two kinds.

- Process metrics (:class:`Instruments`): what only the process that saw it
  knows: webhook intake latency and results, GitHub API calls by route and
  status, the rate-limit budget GitHub reported. Several processes (web
  workers, arq workers) each write their own files under
  ``PROMETHEUS_MULTIPROC_DIR`` and a scrape merges them.
- Record metrics (app/operations/metrics_db.py): what the database already knows
  exactly (runs, outcomes, activity attempts, retries and failures, stale
  writes, outbox depth, phase durations, agent tokens and cost), read at
  scrape time, so they are the same whichever process answers and survive
  restarts.

prometheus_client decides at import whether it runs multiprocess (it reads
``PROMETHEUS_MULTIPROC_DIR`` then), so this module imports it lazily and the
CLI calls :func:`use_multiprocess_dir` before anything touches a metric.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

ENV = "PROMETHEUS_MULTIPROC_DIR"


def use_multiprocess_dir(directory: Path) -> None:
    """Make this process (and the processes it starts) write metric files to
    ``directory``. Must run before prometheus_client is first imported."""
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(directory)


def multiprocess() -> bool:
    return bool(os.environ.get(ENV))


def process_exited() -> None:
    """Drop this process's live gauges from the merged view (at shutdown)."""
    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


#: GitHub API paths -> a bounded route label: every path parameter (names,
#: numbers, shas, refs, file paths) becomes its template placeholder, so one
#: route is one time series and no user or repository name reaches a label.
_ROUTE_RULES = (
    (re.compile(r"^/repos/[^/]+/[^/]+"), "/repos/{owner}/{repo}"),
    (re.compile(r"^/(users|orgs)/[^/]+"), r"/\1/{name}"),
    (re.compile(r"^/app/installations/\d+"), "/app/installations/{id}"),
    (re.compile(r"^/user/installations/\d+"), "/user/installations/{id}"),
    (re.compile(r"/(git/)?(refs|ref|matching-refs)/.+$"), r"/\1\2/{ref}"),
    (re.compile(r"/branches/.+$"), "/branches/{branch}"),
    (re.compile(r"/contents/.+$"), "/contents/{path}"),
    (re.compile(r"/collaborators/[^/]+"), "/collaborators/{username}"),
    (re.compile(r"/labels/[^/]+$"), "/labels/{name}"),
    (re.compile(r"/[0-9a-f]{40}(?=/|$)"), "/{sha}"),
    (re.compile(r"/commits/(?!\{sha\})[^/]+"), "/commits/{ref}"),
    (re.compile(r"/\d+(?=/|$)"), "/{n}"),
)


def route_of(path: str) -> str:
    for pattern, replacement in _ROUTE_RULES:
        path = pattern.sub(replacement, path)
    return path


class Instruments:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.intake_seconds = Histogram(
            "repairbot_intake_seconds",
            "Time to verify, record and route one webhook delivery.",
            ["result"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.intake_batch = Histogram(
            "repairbot_intake_batch_deliveries",
            "Webhook deliveries recorded together in one transaction (group commit).",
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )
        self.intake_results = Counter(
            "repairbot_intake_results", "Webhook deliveries by answer.", ["status", "event"]
        )
        self.webhook_bytes_in_flight = Gauge(
            "repairbot_webhook_bytes_in_flight",
            "Webhook body bytes the web process holds right now.",
            multiprocess_mode="livesum",
        )
        self.github_calls = Counter(
            "repairbot_github_api_calls", "GitHub API calls.", ["method", "route", "status"]
        )
        self.github_rate_remaining = Gauge(
            "repairbot_github_rate_limit_remaining",
            "Requests left in GitHub's current rate-limit window, as last reported.",
            ["resource"],
            multiprocess_mode="livemin",
        )

    def observe_github(self, method: str, path: str, status: int, headers: Any) -> None:
        self.github_calls.labels(method, route_of(path), str(status)).inc()
        remaining = headers.get("x-ratelimit-remaining")
        if remaining is not None and str(remaining).isdigit():
            resource = headers.get("x-ratelimit-resource") or "core"
            self.github_rate_remaining.labels(resource).set(int(remaining))


@cache
def instruments() -> Instruments:
    """This process's instruments, made on first use (after the CLI set up the
    multiprocess directory)."""
    return Instruments()


def process_registry() -> CollectorRegistry:
    """The registry whose exposition holds every process's metrics."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client import multiprocess as mp

    instruments()
    if not multiprocess():
        return REGISTRY
    registry = CollectorRegistry()
    mp.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


class MeteredTransport(httpx.AsyncBaseTransport):
    """An httpx transport that counts every GitHub API call by route and
    status and records the rate-limit budget each answer reports."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, base_path: str = "") -> None:
        self.inner = inner
        self.base_path = base_path.rstrip("/")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except Exception:
            self._observe(request, 0, httpx.Headers())
            raise
        self._observe(request, response.status_code, response.headers)
        return response

    def _observe(self, request: httpx.Request, status: int, headers: httpx.Headers) -> None:
        path = request.url.path
        if self.base_path and path.startswith(self.base_path):
            path = path[len(self.base_path) :]
        instruments().observe_github(request.method, path, status, headers)

    async def aclose(self) -> None:
        await self.inner.aclose()


def metered_transport(api_url: str) -> MeteredTransport:
    """The transport the worker's GitHub clients use: the network, counted."""
    return MeteredTransport(httpx.AsyncHTTPTransport(), base_path=urlsplit(api_url).path)
