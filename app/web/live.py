"""Live updates over server-sent events: a run's status, phase and outcome as
they change. The stream polls the database (the only source of truth, shared
by every web process) and replays the workflow's ``status`` query only when
the run's history grew. A stream lasts at most ``MAX_STREAM_SECONDS``;
browsers reconnect on their own, and the reconnect checks access again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from app.engine.client import RuntimeClient
from app.engine.store import RunRow
from app.engine.tables import CLOSED_STATUSES
from app.runs_view import repo_of, summarize
from app.web.access import Principal

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
MAX_STREAM_SECONDS = 600.0
MAX_LISTED_RUNS = 100


def run_event(runtime: RuntimeClient, run: RunRow) -> dict[str, Any]:
    s = summarize(runtime, run)
    return {
        "run_id": run.run_id,
        "status": run.status,
        "phase": s.phase,
        "outcome": s.outcome,
        "history_length": run.history_length,
        "closed": run.status in CLOSED_STATUSES,
    }


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class Live:
    def __init__(self, runtime: RuntimeClient) -> None:
        self.runtime = runtime

    async def _watch(
        self, request: Request, principal: Principal, keys: list[str]
    ) -> AsyncIterator[str]:
        """Events for the runs named by ``keys`` until every one has closed."""
        seen: dict[str, tuple[str, str | None, int]] = {}
        started = last_sent = time.monotonic()
        yield "retry: 2000\n\n"
        while time.monotonic() - started < MAX_STREAM_SECONDS:
            if await request.is_disconnected():
                return
            all_closed = True
            for key in keys:
                run = await asyncio.to_thread(self.runtime.store.find_run, key)
                if run is None or not principal.may_read(repo_of(run)):
                    continue
                mark = (run.status, run.cancel_phase, run.history_length)
                if run.status not in CLOSED_STATUSES:
                    all_closed = False
                if seen.get(run.run_id) == mark:
                    continue
                seen[run.run_id] = mark
                data = await asyncio.to_thread(run_event, self.runtime, run)
                yield sse("run", data)
                last_sent = time.monotonic()
            if all_closed and seen:
                return
            if time.monotonic() - last_sent > KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(POLL_SECONDS)

    def _stream(self, body: AsyncIterator[str]) -> Response:
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def run(self, request: Request, principal: Principal) -> Response:
        key = request.path_params["run_id"]
        return self._stream(self._watch(request, principal, [key]))

    async def runs(self, request: Request, principal: Principal) -> Response:
        keys = request.query_params.getlist("run")[:MAX_LISTED_RUNS]
        return self._stream(self._watch(request, principal, keys))
