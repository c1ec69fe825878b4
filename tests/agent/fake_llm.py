"""A local stand-in for the OpenAI and Anthropic chat APIs (third-party services).

It answers with the real response shapes (``choices[0].message.content`` and
``usage.prompt_tokens``; ``content[0].text`` and ``usage.input_tokens``),
checks what the real services check (API key header, ``anthropic-version``,
required fields) with their error shapes, records every request, and plays
scripted replies or errors in order. Served in process through
``httpx.ASGITransport``: real HTTP semantics, no socket.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

OPENAI_URL = "http://fake-openai.test/v1"
ANTHROPIC_URL = "http://fake-anthropic.test"
API_KEY = "sk-test-key-123"


@dataclass
class Scripted:
    text: str = ""
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int = 42


@dataclass
class Seen:
    api: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        return "\n".join(str(m["content"]) for m in self.body["messages"])


class FakeLLM:
    def __init__(self) -> None:
        self.script: list[Scripted] = []
        self.seen: list[Seen] = []
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app))

    def reply(self, text: str, **kwargs: Any) -> None:
        self.script.append(Scripted(text=text, **kwargs))

    def fail(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.script.append(Scripted(status=status, body=body, headers=headers or {}))

    def _next(self) -> Scripted:
        return self.script.pop(0) if self.script else Scripted(text="I have no idea.")

    async def _openai(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return _openai_error(401, "Incorrect API key provided.", "invalid_api_key")
        body = json.loads(await request.body())
        if "model" not in body or not body.get("messages"):
            return _openai_error(400, "you must provide a model parameter", None)
        self.seen.append(Seen("openai", dict(request.headers), body))
        step = self._next()
        if step.status != 200:
            return JSONResponse(step.body, status_code=step.status, headers=step.headers)
        prompt_tokens = step.input_tokens or len(json.dumps(body["messages"])) // 4
        return JSONResponse(
            {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": step.text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": step.output_tokens,
                    "total_tokens": prompt_tokens + step.output_tokens,
                },
            }
        )

    async def _anthropic(self, request: Request) -> JSONResponse:
        if request.headers.get("x-api-key") != API_KEY:
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return _anthropic_error(
                400, "invalid_request_error", "anthropic-version header is required"
            )
        body = json.loads(await request.body())
        if "max_tokens" not in body:
            return _anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        if any(m.get("role") == "system" for m in body.get("messages", [])):
            return _anthropic_error(
                400, "invalid_request_error", "messages: unexpected role 'system'"
            )
        self.seen.append(Seen("anthropic", dict(request.headers), body))
        step = self._next()
        if step.status != 200:
            return JSONResponse(step.body, status_code=step.status, headers=step.headers)
        input_tokens = step.input_tokens or len(json.dumps(body["messages"])) // 4
        return JSONResponse(
            {
                "id": f"msg_{next(self._ids):024d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": step.text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": step.output_tokens},
            }
        )


def _openai_error(status: int, message: str, code: str | None) -> JSONResponse:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return JSONResponse({"error": error}, status_code=status)


def _anthropic_error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
    )
