"""Live updates over server-sent events: a run's status, phase and outcome as
they change. The stream polls the database (the only source of truth, shared
by every web process) and replays the workflow's ``status`` query only when
the run's history grew. A stream lasts at most ``MAX_STREAM_SECONDS``;
browsers reconnect on their own, and the reconnect checks access again.

Each stream costs database reads twice a second, so streams are only for
someone who can see the runs they name: the runs are looked up and checked
once before the stream opens (404 for a run the caller may not see, as
GitHub does), a signed-in person who sees no repository at all gets 403, and
one sign-in (or API token) holds at most ``MAX_STREAMS_PER_SESSION`` streams
in this process at once (429 beyond).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.engine import CLOSED_STATUSES, RunRow, RuntimeClient
from app.operations.runs_view import summarize
from app.web.access import Principal
from app.web.tally import Tally

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
MAX_STREAM_SECONDS = 600.0
#: The runs list page shows 25 runs; a stream watches at most that many.
MAX_LISTED_RUNS = 25
MAX_STREAMS_PER_SESSION = 4


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


def stream_holder(principal: Principal) -> str:
    """Whose share of streams a request uses: the sign-in, or the API token."""
    if principal.session is not None:
        return f"session:{principal.session.sid}"
    return principal.name


class _CountedStream(StreamingResponse):
    """An event stream that gives its holder's slot back however it ends:
    finished, disconnected, or cancelled before its first byte (a generator
    that never started would never run its own ``finally``)."""

    def __init__(self, body: AsyncIterator[str], *, on_close: Callable[[], None]) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class Live:
    def __init__(self, runtime: RuntimeClient) -> None:
        self.runtime = runtime
        #: Holder -> streams open in this process.
        self.open = Tally()

    async def _visible_runs(self, principal: Principal, keys: list[str]) -> list[str]:
        """The keys of runs that exist and that ``principal`` may see."""

        def check() -> list[str]:
            found = []
            for key in keys:
                run = self.runtime.store.find_run(key)
                if run is not None and principal.may_read_run(run):
                    found.append(key)
            return found

        return await asyncio.to_thread(check)

    async def _open(self, principal: Principal, keys: list[str]) -> Response | list[str]:
        """The refusal, or the keys a stream may watch."""
        visible = principal.visible()
        if visible is not None and not visible.ids and not visible.names:
            return JSONResponse(
                {"message": "you cannot see any repository this app is installed on"},
                status_code=403,
            )
        watched = await self._visible_runs(principal, keys)
        if not watched:
            return JSONResponse({"message": "Not Found"}, status_code=404)
        if self.open.get(stream_holder(principal), 0) >= MAX_STREAMS_PER_SESSION:
            return JSONResponse(
                {"message": f"at most {MAX_STREAMS_PER_SESSION} live streams per sign-in"},
                status_code=429,
                headers={"retry-after": "5"},
            )
        return watched

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
                if run is None or not principal.may_read_run(run):
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

    async def _serve(self, request: Request, principal: Principal, keys: list[str]) -> Response:
        opened = await self._open(principal, keys)
        if isinstance(opened, Response):
            return opened
        holder = stream_holder(principal)
        # Counted from here, not from the first chunk: a burst of requests
        # cannot all pass the check before any of them is counted.
        self.open.add(holder)
        return _CountedStream(
            self._watch(request, principal, opened), on_close=lambda: self.open.remove(holder)
        )

    async def run(self, request: Request, principal: Principal) -> Response:
        return await self._serve(request, principal, [request.path_params["run_id"]])

    async def runs(self, request: Request, principal: Principal) -> Response:
        keys = list(dict.fromkeys(request.query_params.getlist("run")))[:MAX_LISTED_RUNS]
        return await self._serve(request, principal, keys)
