"""A scripted chat model: the OpenAI and Anthropic APIs' real shapes, fixed answers.

The demo (``repairbot demo --agent builtin``) and the tests point the
built-in agent at it. It serves ``POST /v1/chat/completions`` and
``POST /v1/messages`` over real HTTP, checks the API key header, and answers
turn *n* of a conversation (the number of assistant messages the request
already holds) with the *n*-th scripted turn: text and tool calls in the
provider's own response shape, with token usage. Keyed by turn, not by
arrival, so a resumed loop that asks again for a turn gets the same answer,
and every request is recorded so a test can tell whether a turn was asked twice.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.demo.project import BUGGY_LINE, FIXED_LINE

API_KEY = "sk-demo-scripted-model"


@dataclass(frozen=True)
class Turn:
    """One scripted answer: text and ``(tool name, arguments)`` calls."""

    text: str = ""
    calls: Sequence[tuple[str, dict[str, Any]]] = ()
    input_tokens: int = 900
    output_tokens: int = 60
    #: Answer with this HTTP status and error body instead (e.g. 429).
    status: int = 200
    error: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    refusal: str | None = None


def openai_completion(turn: Turn, model: str, number: int) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{number}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for index, (name, args) in enumerate(turn.calls)
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.text or None,
        "refusal": turn.refusal,
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
        },
    }


def anthropic_message(turn: Turn, model: str, number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text or turn.refusal:
        content.append({"type": "text", "text": turn.text or turn.refusal or ""})
    content += [
        {"type": "tool_use", "id": f"toolu_{number:04d}_{index}", "name": name, "input": args}
        for index, (name, args) in enumerate(turn.calls)
    ]
    stop = "refusal" if turn.refusal else ("tool_use" if turn.calls else "end_turn")
    return {
        "id": f"msg_{number:024d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }


@dataclass(frozen=True)
class SeenRequest:
    api: str
    turn: int
    body: dict[str, Any]


class ScriptedModel:
    """The server; ``script[n]`` answers turn ``n`` (the last one repeats)."""

    def __init__(self, script: Sequence[Turn], *, api_key: str = API_KEY) -> None:
        self.script = list(script)
        self.api_key = api_key
        self.requests: list[SeenRequest] = []
        #: Scripted failures, consumed in order before the turn they precede.
        self.failures: dict[int, list[Turn]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )

    def turns_asked(self) -> list[int]:
        return [r.turn for r in self.requests]

    def _answer(self, api: str, body: dict[str, Any]) -> tuple[Turn, int]:
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        with self._lock:
            self.requests.append(SeenRequest(api, turn, body))
            pending = self.failures.get(turn)
            if pending:
                return pending.pop(0), next(self._ids)
            return self.script[min(turn, len(self.script) - 1)], next(self._ids)

    async def _openai(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            error = {"message": "Incorrect API key provided.", "code": "invalid_api_key"}
            return JSONResponse({"error": error}, status_code=401)
        body = json.loads(await request.body())
        turn, number = self._answer("openai", body)
        if turn.status != 200:
            return JSONResponse(turn.error, status_code=turn.status, headers=turn.headers)
        return JSONResponse(openai_completion(turn, body["model"], number))

    async def _anthropic(self, request: Request) -> JSONResponse:
        if request.headers.get("x-api-key") != self.api_key:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return JSONResponse({"type": "error", "error": error}, status_code=401)
        if not request.headers.get("anthropic-version"):
            error = {"type": "invalid_request_error", "message": "anthropic-version required"}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        body = json.loads(await request.body())
        turn, number = self._answer("anthropic", body)
        if turn.status != 200:
            return JSONResponse(turn.error, status_code=turn.status, headers=turn.headers)
        return JSONResponse(anthropic_message(turn, body["model"], number))


CHANGELOG_ENTRY = "- slugify: no stray hyphens around punctuation"


def demo_repair_script(test_command: str | None = None) -> list[Turn]:
    """How a model would fix the demo's bug with the tools: look, search, read,
    edit, note the change, run the tests, finish.

    The changelog line is appended by a shell command (not idempotent), so
    an edit applied twice would show as two lines.
    """
    tests: tuple[str, dict[str, Any]] = (
        ("run_command", {"command": test_command}) if test_command else ("run_tests", {})
    )
    return [
        Turn("Let me look at the repository.", [("list_files", {})]),
        Turn("", [("search", {"pattern": r"\.join\(", "path": "slugify"})]),
        Turn("", [("read_file", {"path": "slugify/__init__.py"})]),
        Turn(
            "Empty words at the ends become stray hyphens; drop them before joining.",
            [
                (
                    "replace_in_file",
                    {"path": "slugify/__init__.py", "old_text": BUGGY_LINE, "new_text": FIXED_LINE},
                )
            ],
        ),
        Turn("", [("run_command", {"command": f"echo '{CHANGELOG_ENTRY}' >> CHANGES.md"})]),
        Turn("", [("run_reproduction", {}), tests]),
        Turn(
            "",
            [
                (
                    "finish",
                    {
                        "summary": "slugify joined empty words produced by leading and "
                        "trailing punctuation; empty words are now skipped."
                    },
                )
            ],
        ),
    ]
