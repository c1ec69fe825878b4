from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from githubkit.exception import (
    PrimaryRateLimitExceeded,
    RequestError,
    RequestFailed,
    RequestTimeout,
    SecondaryRateLimitExceeded,
)
from githubkit.response import Response

from app.engine._errors import AmbiguousError, PermanentError, TransientError
from app.github.errors import classified, classify, no_answer, rate_limit_delay

URL = "https://api.github.com/repos/octo/demo/issues/1/comments"
NOW = 1_700_000_000.0


def request(method: str = "POST") -> httpx.Request:
    return httpx.Request(method, URL + "?access_token=secret")


def failed(
    status: int,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> RequestFailed:
    raw = httpx.Response(
        status,
        headers=headers,
        json={"message": "Nope"} if body is None else body,
        request=request(method),
    )
    return RequestFailed(Response(raw, Any))


def lost(exc_type: type[httpx.TransportError], method: str) -> RequestError[Any]:
    inner = exc_type("connection lost", request=request(method))
    if isinstance(inner, httpx.TimeoutException):
        return RequestTimeout(inner)
    return RequestError(inner)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_transient(status: int) -> None:
    result = classify(failed(status))
    assert isinstance(result, TransientError)
    assert result.next_retry_delay is None
    assert (
        f"{status}" in result.message
        and "POST /repos/octo/demo/issues/1/comments" in result.message
    )


@pytest.mark.parametrize(
    ("status", "headers", "delay"),
    [
        (403, {"retry-after": "30"}, 30.0),
        (429, {"retry-after": "7"}, 7.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 120)}, 121.0),
        (429, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 5)}, 1.0),
        (429, {}, 60.0),
    ],
)
def test_rate_limits_wait_as_long_as_github_asks(
    status: int, headers: dict[str, str], delay: float
) -> None:
    result = classify(failed(status, headers=headers), now=lambda: NOW)
    assert isinstance(result, TransientError)
    assert result.next_retry_delay == pytest.approx(delay)


def test_secondary_limit_by_message_only() -> None:
    body = {"message": "You have exceeded a secondary rate limit. Please wait."}
    result = classify(failed(403, body=body))
    assert isinstance(result, TransientError) and result.next_retry_delay == 60.0


def test_githubkit_rate_limit_exceptions_keep_their_delay() -> None:
    raw = httpx.Response(403, json={"message": "x"}, request=request())
    primary = PrimaryRateLimitExceeded(Response(raw, Any), timedelta(seconds=90))
    secondary = SecondaryRateLimitExceeded(Response(raw, Any), timedelta(seconds=0))
    assert classify(primary).next_retry_delay == 90.0
    assert classify(secondary).next_retry_delay == 1.0  # never zero: do not spin


def test_forbidden_without_rate_limit_is_permanent_with_githubs_message() -> None:
    result = classify(failed(403, body={"message": "Resource not accessible by integration"}))
    assert isinstance(result, PermanentError)
    assert "Resource not accessible by integration" in result.message


def test_validation_error_message_includes_details() -> None:
    body = {
        "message": "Validation Failed",
        "errors": [{"resource": "PullRequest", "code": "custom", "message": "No commits between"}],
    }
    result = classify(failed(422, body=body))
    assert isinstance(result, PermanentError)
    assert "Validation Failed (No commits between)" in result.message


@pytest.mark.parametrize("status", [400, 404, 409, 410, 422])
def test_other_client_errors_are_permanent(status: int) -> None:
    assert isinstance(classify(failed(status)), PermanentError)


def test_unauthorized_after_the_refresh_is_permanent() -> None:
    result = classify(failed(401, method="GET"))
    assert isinstance(result, PermanentError) and "after a token refresh" in result.message


@pytest.mark.parametrize(
    "exc_type", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError]
)
def test_no_answer_is_ambiguous_after_a_mutation_and_transient_after_a_read(
    exc_type: type[httpx.TransportError],
) -> None:
    assert isinstance(classify(lost(exc_type, "POST")), AmbiguousError)
    assert isinstance(classify(lost(exc_type, "PATCH")), AmbiguousError)
    assert isinstance(classify(lost(exc_type, "GET")), TransientError)
    assert no_answer(lost(exc_type, "POST"))


@pytest.mark.parametrize("exc_type", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_nothing_sent_is_transient_even_for_a_mutation(
    exc_type: type[httpx.TransportError],
) -> None:
    assert isinstance(classify(lost(exc_type, "PUT")), TransientError)
    assert not no_answer(lost(exc_type, "PUT"))


def test_explicit_mutation_flag_wins_over_the_method() -> None:
    exc = lost(httpx.ReadTimeout, "GET")
    assert isinstance(classify(exc, mutation=True), AmbiguousError)
    assert isinstance(classify(lost(httpx.ReadTimeout, "POST"), mutation=False), TransientError)


def test_failure_inside_token_minting_is_classified_by_its_own_answer() -> None:
    # githubkit wraps whatever the auth flow raised: the real request was never sent.
    assert isinstance(classify(RequestError(failed(404))), PermanentError)
    assert isinstance(classify(RequestError(failed(503))), TransientError)
    minting_lost = RequestError(lost(httpx.ReadTimeout, "POST"))
    assert isinstance(classify(minting_lost), TransientError)
    assert not no_answer(RequestError(failed(500)))


def test_messages_never_carry_the_query_string() -> None:
    for exc in (failed(500), failed(404), lost(httpx.ReadTimeout, "POST")):
        assert "secret" not in classify(exc).message


def test_classified_converts_and_chains() -> None:
    original = failed(404)
    with pytest.raises(PermanentError) as caught, classified():
        raise original
    assert caught.value.__cause__ is original


def test_classified_leaves_other_errors_alone() -> None:
    with pytest.raises(KeyError), classified():
        raise KeyError("not ours to judge")


def test_rate_limit_delay_is_none_for_ordinary_answers() -> None:
    ok = httpx.Response(200, request=request())
    assert rate_limit_delay(ok) is None
    forbidden = httpx.Response(403, json={"message": "Forbidden"}, request=request())
    assert rate_limit_delay(forbidden) is None


def test_an_already_classified_failure_from_the_auth_flow_is_kept() -> None:
    inner = PermanentError("GitHub answered 404 to POST /app/installations/1/access_tokens")
    assert classify(RequestError(inner)) is inner


def test_a_suspended_installation_waits_instead_of_failing() -> None:
    """Calls of a suspended installation answer 403 until the owner
    unsuspends it: the run waits for that (retries far apart), it does not end."""
    result = classify(failed(403, body={"message": "This installation has been suspended"}))
    assert isinstance(result, TransientError)
    assert result.next_retry_delay == 60.0
    assert isinstance(classify(failed(403, body={"message": "Forbidden"})), PermanentError)
