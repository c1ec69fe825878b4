"""One model call of the built-in agent: request, response, failure class.

Failures carry their retryability (see :func:`app.agent.http.raise_for_status`):
429 and 5xx are transient with the server's ``retry-after``; a prompt longer
than the model's context window is :class:`ContextTooLong` (the loop trims
old tool output and asks again); other 4xx are permanent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import httpx

from app.agent.http import ANTHROPIC_VERSION, DEFAULT_BASE_URLS, error_detail, raise_for_status
from app.agent.steps import ModelTurn, Step
from app.agent.tools import TOOLS
from app.agent.wire import anthropic_body, openai_body, parse_anthropic, parse_openai
from app.engine import TransientError

Provider = Literal["openai", "anthropic"]


class ContextTooLong(Exception):
    """The request does not fit the model's context window."""


class ChatModel:
    def __init__(
        self,
        *,
        provider: Provider,
        model: str,
        api_key: str,
        client: httpx.AsyncClient,
        base_url: str | None = None,
        max_output_tokens: int = 4096,
        request_timeout: float = 300.0,
    ) -> None:
        self.provider = provider
        self.model = model
        self.api_key = api_key
        self.client = client
        self.base_url = (base_url or DEFAULT_BASE_URLS[provider]).rstrip("/")
        self.max_output_tokens = max_output_tokens
        self.request_timeout = request_timeout

    def __repr__(self) -> str:  # never show the key
        return f"ChatModel({self.provider}, {self.model!r}, {self.base_url!r})"

    @property
    def name(self) -> str:
        return f"builtin:{self.provider}/{self.model}"

    def request(self, steps: Sequence[Step]) -> tuple[str, dict[str, str], dict[str, Any]]:
        if self.provider == "openai":
            return (
                f"{self.base_url}/chat/completions",
                {"Authorization": f"Bearer {self.api_key}"},
                openai_body(self.model, steps, TOOLS, self.max_output_tokens),
            )
        return (
            f"{self.base_url}/v1/messages",
            {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION},
            anthropic_body(self.model, steps, TOOLS, self.max_output_tokens),
        )

    async def complete(self, steps: Sequence[Step]) -> ModelTurn:
        url, headers, body = self.request(steps)
        try:
            response = await self.client.post(
                url, headers=headers, json=body, timeout=self.request_timeout
            )
        except httpx.TransportError as exc:
            raise TransientError(
                f"{self.provider} API unreachable: {type(exc).__name__}: {exc}"
            ) from None
        if _context_too_long(response):
            raise ContextTooLong(error_detail(response)[0])
        raise_for_status(self.provider, response)
        try:
            data = response.json()
            return parse_openai(data) if self.provider == "openai" else parse_anthropic(data)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise TransientError(
                f"{self.provider} API answered {response.status_code} with an unexpected body: "
                f"{type(exc).__name__}: {exc}"
            ) from None


def _context_too_long(response: httpx.Response) -> bool:
    # OpenAI: 400 code context_length_exceeded; Anthropic: 400
    # invalid_request_error "prompt is too long: N tokens > M maximum".
    if response.status_code not in (400, 413):
        return False
    message, code = error_detail(response)
    lowered = message.lower()
    return (
        code == "context_length_exceeded"
        or "prompt is too long" in lowered
        or "maximum context length" in lowered
    )
