"""The HTTP back end: a chat model behind an OpenAI-compatible or Anthropic API.

One proposal is one conversation: the issue, the failing reproduction,
feedback and the relevant files go in; a unified diff is read from the
answer, checked with ``git apply --check`` and applied to the workspace. An
answer without a usable diff gets one follow-up turn that quotes git's
complaint (``max_turns``); after that the attempt fails as a tool failure.

Failures of the API carry their retryability: 429 and 5xx are transient and
honour ``retry-after`` (seconds or an HTTP date) as the next retry delay;
other 4xx are permanent (a bad key or model will not fix itself), and so is
OpenAI's 429 ``insufficient_quota``; connection errors and timeouts are
transient.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

from app.agent.base import Agent, AgentFailed, AgentProposal, AgentRequest
from app.agent.context import ContextBudget, choose_files
from app.agent.prompt import SYSTEM, extract_diff, retry_message, user_message
from app.engine.errors import PermanentError, TransientError
from app.workspace import PatchRejected, apply_patch, changed_paths, diff_from

Provider = Literal["openai", "anthropic"]
DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
ANTHROPIC_VERSION = "2023-06-01"
#: A server asking us to wait longer than this is not believed.
MAX_RETRY_AFTER = 3600.0

Message = dict[str, str]


@dataclass(frozen=True)
class AgentHttp:
    """The HTTP client agents use, given to workers under its own type.

    A client of its own matters: a client configured for another service
    (GitHub's, with its auth) must never be picked up and send those
    credentials to a model provider.
    """

    client: httpx.AsyncClient


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int


class _Api(abc.ABC):
    """One chat API's request and response shapes."""

    def __init__(self, base_url: str, api_key: str, model: str, max_output_tokens: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.max_output_tokens = max_output_tokens

    @abc.abstractmethod
    def request(self, system: str, messages: list[Message]) -> tuple[str, dict[str, str], Any]:
        """URL, headers and JSON body of one completion request."""

    @abc.abstractmethod
    def parse(self, body: Any) -> Completion: ...


class _OpenAI(_Api):
    def request(self, system: str, messages: list[Message]) -> tuple[str, dict[str, str], Any]:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, *messages],
            "max_tokens": self.max_output_tokens,
        }
        return (
            f"{self.base_url}/chat/completions",
            {"Authorization": f"Bearer {self.api_key}"},
            body,
        )

    def parse(self, body: Any) -> Completion:
        text = body["choices"][0]["message"].get("content") or ""
        usage = body.get("usage") or {}
        return Completion(
            str(text), int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        )


class _Anthropic(_Api):
    def request(self, system: str, messages: list[Message]) -> tuple[str, dict[str, str], Any]:
        body = {
            "model": self.model,
            "system": system,
            "messages": messages,
            "max_tokens": self.max_output_tokens,
        }
        headers = {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}
        return f"{self.base_url}/v1/messages", headers, body

    def parse(self, body: Any) -> Completion:
        text = "".join(
            block.get("text", "") for block in body["content"] if block.get("type") == "text"
        )
        usage = body.get("usage") or {}
        return Completion(
            text, int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
        )


class HttpAgent(Agent):
    def __init__(
        self,
        *,
        provider: Provider,
        model: str,
        api_key: str,
        client: httpx.AsyncClient,
        base_url: str | None = None,
        budget: ContextBudget | None = None,
        max_output_tokens: int = 4096,
        max_turns: int = 2,
        request_timeout: float = 300.0,
    ) -> None:
        api_class = _OpenAI if provider == "openai" else _Anthropic
        self.api = api_class(
            base_url or DEFAULT_BASE_URLS[provider], api_key, model, max_output_tokens
        )
        self.provider = provider
        self.client = client
        self.budget = budget or ContextBudget()
        self.max_turns = max_turns
        self.request_timeout = request_timeout

    def __repr__(self) -> str:  # never show the key
        return f"HttpAgent({self.provider}, {self.api.model!r}, {self.api.base_url!r})"

    @property
    def name(self) -> str:
        return f"http:{self.provider}/{self.api.model}"

    async def propose(self, request: AgentRequest) -> AgentProposal:
        ws = request.workspace
        files = await choose_files(
            ws,
            failure_text=request.reproduction_output,
            other_text="\n".join([request.issue_body, *(item.text for item in request.feedback)]),
            budget=self.budget,
        )
        messages: list[Message] = [{"role": "user", "content": user_message(request, files)}]
        used_in = used_out = 0
        transcript: list[str] = []
        problem: str | None = "no turn was allowed"
        for _ in range(self.max_turns):
            reply = await self.complete(SYSTEM, messages)
            used_in += reply.input_tokens
            used_out += reply.output_tokens
            transcript.append(reply.text)
            problem = await _apply_reply(extract_diff(reply.text), request)
            if problem is None:
                return AgentProposal(
                    patch=await diff_from(ws, request.diff_base),
                    summary=_summary(reply.text),
                    files_changed=await changed_paths(ws, request.diff_base),
                    input_tokens=used_in,
                    output_tokens=used_out,
                    backend=self.name,
                    transcript=_join(transcript),
                )
            messages += [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": retry_message(problem)},
            ]
        raise AgentFailed(
            f"the model gave no diff that applies in {self.max_turns} turn(s): {problem}",
            transcript=_join(transcript),
        )

    async def complete(self, system: str, messages: list[Message]) -> Completion:
        """One API call, with failures mapped to transient or permanent errors."""
        url, headers, body = self.api.request(system, messages)
        try:
            response = await self.client.post(
                url, headers=headers, json=body, timeout=self.request_timeout
            )
        except httpx.TransportError as exc:
            raise TransientError(
                f"{self.provider} API unreachable: {type(exc).__name__}: {exc}"
            ) from None
        _raise_for_status(self.provider, response)
        try:
            return self.api.parse(response.json())
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise TransientError(
                f"{self.provider} API answered {response.status_code} with an unexpected body: "
                f"{type(exc).__name__}: {exc}"
            ) from None


async def _apply_reply(patch: str | None, request: AgentRequest) -> str | None:
    """Apply the reply's diff; the problem with it, or ``None`` when applied."""
    if patch is None:
        return "it contains no unified diff"
    try:
        await apply_patch(request.workspace, patch, check=True)
        await apply_patch(request.workspace, patch)
    except PatchRejected as exc:
        return f"`git apply` rejected the diff: {exc}"
    return None


def _summary(reply: str) -> str:
    # The prose before the diff is the model's explanation.
    head = reply.split("```", 1)[0].strip()
    return head[:2000]


def _join(parts: list[str]) -> bytes:
    return "\n\n----- next turn -----\n\n".join(parts).encode()


def _raise_for_status(provider: str, response: httpx.Response) -> None:
    status = response.status_code
    if 200 <= status < 300:
        return
    message, code = _error_detail(response)
    text = f"{provider} API answered {status}: {message}"
    if status == 429 and code == "insufficient_quota":
        raise PermanentError(text)
    if status in (408, 409, 429) or status >= 500:
        raise TransientError(text, next_retry_delay=retry_after(response.headers))
    raise PermanentError(text)


def _error_detail(response: httpx.Response) -> tuple[str, str]:
    try:
        error = response.json().get("error")
    except ValueError:
        return response.text[:300] or response.reason_phrase, ""
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300], str(error.get("code") or "")
    return str(error)[:300], ""


def retry_after(headers: httpx.Headers, *, now: datetime | None = None) -> float | None:
    """Seconds a server asked us to wait: ``retry-after-ms``, or ``retry-after``
    as seconds or an HTTP date. ``None`` when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return _bounded(float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return _bounded(float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return _bounded((when - (now or datetime.now(UTC))).total_seconds())


def _bounded(seconds: float) -> float | None:
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
