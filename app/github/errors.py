"""Classify GitHub and transport failures into the runtime's failure classes.

The runtime decides what to do from the error type alone (transient: retry
with backoff or GitHub's requested delay; permanent: stop; ambiguous: run the
activity's reconcile first). The rules:

- Rate limits (403/429 with ``retry-after``, or ``x-ratelimit-remaining: 0``
  with ``x-ratelimit-reset``, or GitHub's "secondary rate limit" message):
  transient, after the delay GitHub asks for.
- 5xx: transient. Every mutation in this package reconciles (finds its marker
  or reads state back) before acting, so running it again is safe even if the
  failed request had taken effect.
- 401: permanent. The client's auth already refreshed the installation token
  once and retried; a fresh token refused means the installation is gone or
  the key is wrong, which no retry fixes.
- Other 4xx: permanent, with GitHub's message.
- No answer (timeout, dropped connection): ambiguous after a request that may
  have mutated something, transient otherwise. A connection that was never
  established sent nothing, so it is transient even for a mutation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from githubkit.exception import (
    AuthExpiredError,
    GitHubException,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
)

from app.engine import ActivityFailure, AmbiguousError, PermanentError, TransientError

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Raised before a single byte of the request left this machine.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
#: GitHub asks for at least a minute when a secondary limit gives no retry-after.
SECONDARY_LIMIT_DELAY = 60.0

Clock = Callable[[], float]


def status_of(exc: BaseException) -> int | None:
    """HTTP status of a failed GitHub request, ``None`` when there was no answer."""
    if isinstance(exc, RequestFailed):
        return exc.response.status_code
    return None


def no_answer(exc: BaseException) -> bool:
    """Whether a request may have reached GitHub but its answer never came back.

    This is the "lost response" case where a mutation must be read back before
    anything else happens. Failures before sending (no connection, or our own
    token minting failing) and HTTP error answers are not.
    """
    if isinstance(exc, RequestFailed):
        return False
    inner = exc.exc if isinstance(exc, RequestError) else exc
    return isinstance(inner, httpx.TransportError) and not isinstance(inner, _NOT_SENT)


#: GitHub's answer to any call with a suspended installation's credentials.
SUSPENDED = "This installation has been suspended"
SUSPENDED_RETRY_SECONDS = 60.0


def github_message(exc: RequestFailed) -> str:
    """GitHub's own words: ``message`` plus any validation ``errors`` detail."""
    try:
        data: Any = exc.response.json()
    except ValueError:
        return exc.response.text[:500]
    if not isinstance(data, dict):
        return str(data)[:500]
    message = str(data.get("message", ""))
    details = []
    for error in data.get("errors") or ():
        if isinstance(error, dict):
            details.append(str(error.get("message") or error.get("code") or error))
        else:
            details.append(str(error))
    return f"{message} ({'; '.join(details)})" if details else message


def rate_limit_delay(response: httpx.Response, *, now: Clock = time.time) -> float | None:
    """Seconds GitHub asks us to wait, or ``None`` if this is not a rate limit."""
    if response.status_code not in (403, 429):
        return None
    headers = response.headers
    if "retry-after" in headers:
        try:
            return max(1.0, float(headers["retry-after"]))
        except ValueError:
            return SECONDARY_LIMIT_DELAY
    if headers.get("x-ratelimit-remaining") == "0":
        try:
            # One second past the reset: the window boundary is inclusive on GitHub's side.
            return max(1.0, float(headers["x-ratelimit-reset"]) - now() + 1.0)
        except (KeyError, ValueError):
            return SECONDARY_LIMIT_DELAY
    if response.status_code == 429 or "secondary rate limit" in response.text.lower():
        return SECONDARY_LIMIT_DELAY
    return None


def _describe(request: httpx.Request | None) -> str:
    # Method and path only: query strings and headers stay out of messages.
    return f"{request.method} {request.url.path}" if request is not None else "request"


def _request_of(exc: BaseException) -> httpx.Request | None:
    if isinstance(exc, RequestFailed):
        return exc.request
    inner = exc.exc if isinstance(exc, RequestError) else exc
    if isinstance(inner, httpx.RequestError):
        try:
            return inner.request
        except RuntimeError:  # httpx raises when the request was never attached
            return None
    return None


def classify(
    exc: GitHubException | httpx.TransportError,
    *,
    mutation: bool | None = None,
    now: Clock = time.time,
) -> ActivityFailure:
    """The failure class for ``exc``.

    ``mutation`` says whether the call could have changed something on GitHub;
    left ``None`` it is read from the HTTP method (anything but GET, HEAD and
    OPTIONS counts as a mutation, the safe assumption).
    """
    request = _request_of(exc)
    if mutation is None:
        mutation = request is None or request.method.upper() not in _SAFE_METHODS
    what = _describe(request)

    if isinstance(exc, RequestFailed):
        return _classify_status(exc, what, now)
    if isinstance(exc, RequestError):
        inner = exc.exc
        if isinstance(inner, ActivityFailure):
            return inner  # already classified (our token minting, inside the auth flow)
        if isinstance(inner, GitHubException | httpx.TransportError):
            # Raised inside the auth flow (minting a token): the request itself
            # was never sent, so it changed nothing.
            if isinstance(inner, RequestFailed | RequestError):
                return classify(inner, mutation=False, now=now)
            return classify(inner, mutation=mutation, now=now)
        return TransientError(f"{what} failed: {inner!r}")
    if isinstance(exc, httpx.TransportError):
        if isinstance(exc, _NOT_SENT):
            return TransientError(f"{what} could not connect: {exc!r}")
        if mutation:
            return AmbiguousError(f"no answer to {what} (it may have taken effect): {exc!r}")
        return TransientError(f"no answer to {what}: {exc!r}")
    if isinstance(exc, AuthExpiredError):
        return TransientError(f"credentials expired during {what}")
    return PermanentError(f"{type(exc).__name__} during {what}: {exc!r}")


def _classify_status(exc: RequestFailed, what: str, now: Clock) -> ActivityFailure:
    status = exc.response.status_code
    if isinstance(exc, RateLimitExceeded):
        wait = max(1.0, exc.retry_after.total_seconds())
        return TransientError(f"rate limited on {what}", next_retry_delay=wait)
    asked = rate_limit_delay(exc.response.raw_response, now=now)
    if asked is not None:
        return TransientError(f"rate limited on {what}", next_retry_delay=asked)
    message = github_message(exc)
    if status >= 500:
        return TransientError(f"GitHub answered {status} to {what}: {message}")
    if status == 401:
        return PermanentError(f"GitHub refused our credentials for {what} after a token refresh")
    if status == 403 and message.startswith(SUSPENDED):
        # The owner suspended the installation: every call fails until they
        # unsuspend it, so the call waits (retried a minute apart, holding no
        # worker) and goes through after the unsuspend.
        return TransientError(f"{what}: {message}", next_retry_delay=SUSPENDED_RETRY_SECONDS)
    return PermanentError(f"GitHub answered {status} to {what}: {message}")


@contextmanager
def classified(*, mutation: bool | None = None) -> Iterator[None]:
    """Turn GitHub and transport failures raised inside the block into failure classes."""
    try:
        yield
    except (GitHubException, httpx.TransportError) as exc:
        raise classify(exc, mutation=mutation) from exc
