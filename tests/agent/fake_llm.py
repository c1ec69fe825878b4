"""A stand-in for the OpenAI and Anthropic chat APIs (third-party services),
served on a real socket in the test process.

It is :class:`app.demo.scripted_model.ScriptedModel` (the providers' real
request checks and response shapes, tool calls included, streaming off;
answers keyed by conversation turn; every request recorded) behind uvicorn
on a thread, so the agent talks real HTTP to it, and so can a worker in
another process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse

from app.demo.scripted_model import API_KEY, ScriptedModel, Turn
from app.demo.serve import ServerThread, bind

__all__ = ["API_KEY", "FakeLLM", "Turn", "call", "context_too_long", "rate_limited"]


class FakeLLM(ScriptedModel):
    def __init__(self, script: Sequence[Turn] = ()) -> None:
        super().__init__(script or [Turn("I have no idea.")])
        self._server: ServerThread | None = None
        self._holds: dict[int, threading.Event] = {}
        #: Turns whose (first) request arrived and is being held unanswered.
        self.holding: list[int] = []
        #: The headers of every OpenAI-style request, in arrival order.
        self.headers_seen: list[dict[str, str]] = []

    def __enter__(self) -> FakeLLM:
        self._server = ServerThread(self.app, bind(), name="fake-llm").start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "use FakeLLM as a context manager"
        return self._server.url

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def fail_before(self, turn: int, *failures: Turn) -> None:
        """Answer turn ``turn`` with these failures first, in order."""
        self.failures.setdefault(turn, []).extend(failures)

    def hold(self, turn: int) -> threading.Event:
        """Leave the first OpenAI request for ``turn`` unanswered (listed in
        ``holding``) until the returned event is set; it is then answered
        (and recorded) as usual, to whoever is still listening."""
        release = threading.Event()
        self._holds[turn] = release
        return release

    async def _openai(self, request: Request) -> JSONResponse:
        self.headers_seen.append({k.lower(): v for k, v in request.headers.items()})
        body = json.loads(await request.body())  # Starlette keeps it for the answer
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        release = self._holds.pop(turn, None)
        if release is not None:
            self.holding.append(turn)
            await anyio.to_thread.run_sync(release.wait)
        return await super()._openai(request)

    def bodies(self, api: str | None = None) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if api is None or r.api == api]


def call(name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return (name, args)


def rate_limited(retry_after: str) -> Turn:
    return Turn(
        status=429,
        error={"error": {"message": "Rate limit reached", "type": "requests", "code": None}},
        headers={"retry-after": retry_after},
    )


def context_too_long(api: str) -> Turn:
    if api == "openai":
        error: dict[str, Any] = {
            "error": {
                "message": "This model's maximum context length is 128000 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    else:
        error = {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        }
    return Turn(status=400, error=error)
