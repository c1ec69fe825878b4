"""HTTP transport shared by the model providers: failure classes and ``retry-after``.

Failures of the API carry their retryability: 429 and 5xx are transient and
honour ``retry-after`` (seconds or an HTTP date) as the next retry delay;
other 4xx are permanent (a bad key or model will not fix itself), and so is
OpenAI's 429 ``insufficient_quota``; connection errors and timeouts are
transient.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from app.engine import PermanentError, TransientError

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
ANTHROPIC_VERSION = "2023-06-01"
#: A server asking us to wait longer than this is not believed.
MAX_RETRY_AFTER = 3600.0


@dataclass(frozen=True)
class AgentHttp:
    """The HTTP client agents use, given to workers under its own type.

    A client of its own matters: a client configured for another service
    (GitHub's, with its auth) must never be picked up and send those
    credentials to a model provider.
    """

    client: httpx.AsyncClient


def raise_for_status(provider: str, response: httpx.Response) -> None:
    """Map a non-2xx answer to a transient or permanent error."""
    status = response.status_code
    if 200 <= status < 300:
        return
    message, code = error_detail(response)
    text = f"{provider} API answered {status}: {message}"
    if status == 429 and code == "insufficient_quota":
        raise PermanentError(text)
    if status in (408, 409, 429) or status >= 500:
        raise TransientError(text, next_retry_delay=retry_after(response.headers))
    raise PermanentError(text)


def error_detail(response: httpx.Response) -> tuple[str, str]:
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
