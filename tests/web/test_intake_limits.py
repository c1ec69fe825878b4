"""The public port under abuse: slow bodies, too many bytes at once, oversized
and unparsable signed bodies. Served by uvicorn over real sockets, because
slowness and memory only exist there."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.config import Settings
from app.demo.serve import ServerThread, bind
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.web import create_app
from app.webhooks.signature import sign
from handlers import build_router
from tests.web.support import SECRET, STAND_INS, example

READ_TIMEOUT = 1.0
MAX_BYTES = 64 * 1024
IN_FLIGHT = 100 * 1024


@pytest.fixture
def server(db_engine: Engine) -> Iterator[ServerThread]:
    settings = Settings(
        github_webhook_secret=SECRET,
        webhook_read_timeout=READ_TIMEOUT,
        webhook_max_bytes=MAX_BYTES,
        webhook_bytes_in_flight=IN_FLIGHT,
    )
    runtime = Runtime(db_engine, Registry.of(STAND_INS))
    web = create_app(settings, runtime, router=build_router())
    thread = ServerThread(web, bind(), name="web").start()
    thread.gate = web.state.body_gate  # type: ignore[attr-defined]
    yield thread
    thread.stop()


def _open(server: ServerThread, length: int | None, first: bytes, **headers: str) -> socket.socket:
    """A connection that sent its headers and ``first`` bytes of body, then stalls."""
    host, port = server.sock.getsockname()[:2]
    conn = socket.create_connection((host, port), timeout=30)
    lines = [
        "POST /webhooks/github HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        "X-GitHub-Event: issues",
        "X-GitHub-Delivery: slow-1",
        *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()),
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    else:
        lines.append("Transfer-Encoding: chunked")
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + first)
    return conn


def _answer(conn: socket.socket) -> tuple[int, bytes]:
    """The status of the response, reading until the server closes the connection."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    assert data, "connection closed without an answer"
    return int(data.split(b" ", 2)[1]), data


def _gauge_settles(server: ServerThread, expected: int) -> bool:
    """Whether the bytes the gate holds reach ``expected`` (read in-process: the
    /metrics route needs sign-in; the server thread may not have read yet)."""
    deadline = time.monotonic() + 10
    while server.gate.in_flight != expected and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    return bool(server.gate.in_flight == expected)  # type: ignore[attr-defined]


def _post(server: ServerThread, body: bytes, delivery: str, event: str) -> httpx.Response:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(body, SECRET),
        "Content-Type": "application/json",
    }
    return httpx.post(f"{server.url}/webhooks/github", content=body, headers=headers)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_slow_body_is_cut_off_with_408_and_its_bytes_released(
    server: ServerThread, deliveries: Any
) -> None:
    first = b'{"action": "opened", ' + b" " * 20_000
    conn = _open(server, 50_000, first)
    # What arrived is held while the rest trickles; the declared length is not.
    assert _gauge_settles(server, len(first))
    status, raw = _answer(conn)  # returns once the server has answered and closed
    assert status == 408 and b"connection: close" in raw.lower()
    assert _gauge_settles(server, 0)
    assert deliveries() == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_beyond_the_in_flight_cap_new_bodies_get_503_as_they_outgrow_it(
    server: ServerThread, deliveries: Any
) -> None:
    stalled = _open(server, 60_001, b"{" * 60_000)
    assert _gauge_settles(server, 60_000)
    body = b'{"zen": "x", "hook_id": 1, "sender": {"login": "a", "id": 1}, "pad": "'
    body += b"x" * 50_000 + b'"}'
    refused = _post(server, body, "d-busy", event="ping")
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) >= 1
    assert _gauge_settles(server, 60_000)  # the refused body's bytes were dropped
    assert _answer(stalled)[0] == 408
    accepted = _post(server, body, "d-later", event="ping")
    assert accepted.status_code == 202, accepted.text
    assert [r.delivery_id for r in deliveries()] == ["d-later"]
    assert _gauge_settles(server, 0)
    assert server.gate.refused[503] == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_chunked_body_is_held_to_the_same_budget(server: ServerThread) -> None:
    stalled = _open(server, 60_001, b"{" * 60_000)
    assert _gauge_settles(server, 60_000)
    # No Content-Length: refused when it outgrows what is left (40 KB), not before.
    conn = _open(server, None, b"")
    chunk = b"x" * 30_000
    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2)
    assert _answer(conn)[0] == 503
    assert _answer(stalled)[0] == 408
    assert _gauge_settles(server, 0)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_oversized_bodies_get_413(server: ServerThread, deliveries: Any) -> None:
    declared = _open(server, MAX_BYTES + 1, b"")
    assert _answer(declared)[0] == 413  # refused on the header alone
    chunked = _open(server, None, b"")
    chunk = b"x" * 40_000
    chunked.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2)
    assert _answer(chunked)[0] == 413
    assert deliveries() == []
    assert _gauge_settles(server, 0)


UNPARSABLE = {
    "deep-array": b"[" * 100_000,
    "deep-object": b'{"a":' * 100_000,
    "deep-but-closed": b"[" * 50_000 + b"]" * 50_000,
    "invalid-utf8": b'{"action": "opened", "x": "\xff\xfe\xc3"}',
    "top-level-array": b'[{"action": "opened"}]',
    "form-encoded": b"payload=%7B%22action%22%3A%22opened%22%7D",
    "empty": b"",
    "nul-in-action": b'{"action": "open\\u0000ed", "sender": {"login": "a", "id": 1}}',
    "lone-surrogate": b'{"action": "\\ud800", "sender": {"login": "\\udfff", "id": 1}}',
}


@pytest.mark.parametrize("name", sorted(UNPARSABLE))
async def test_unparsable_signed_bodies_are_kept_as_malformed_with_400(
    web: Any, deliveries: Any, name: str
) -> None:
    poster, _ = web
    response = await poster.post("issues", UNPARSABLE[name], delivery=f"bad-{name}")
    assert response.status_code == 400, response.text
    [row] = deliveries()
    assert (row.delivery_id, row.status) == (f"bad-{name}", "malformed")
    assert row.body == UNPARSABLE[name]  # kept byte for byte
    again = await poster.post("issues", UNPARSABLE[name], delivery=f"bad-{name}")
    assert again.status_code == 200 and len(deliveries()) == 1


@pytest.mark.parametrize(
    ("headers", "key_prefix"),
    [
        ({"X-GitHub-Delivery": ""}, "unidentified:"),
        ({"X-GitHub-Delivery": "x" * 500}, "invalid:"),
        ({"X-GitHub-Event": ""}, None),
        ({"X-GitHub-Event": "Issues; DROP"}, None),
    ],
)
async def test_signed_deliveries_with_unusable_headers_are_still_kept(
    web: Any, deliveries: Any, headers: dict[str, str], key_prefix: str | None
) -> None:
    poster, _ = web
    body = b'{"action": "opened"}'
    sent = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "hdr-1",
        "X-Hub-Signature-256": sign(body, SECRET),
        **headers,
    }
    response = await poster.client.post("/webhooks/github", content=body, headers=sent)
    assert response.status_code == 400
    [row] = deliveries()
    assert row.status == "malformed"
    if key_prefix:
        assert row.delivery_id.startswith(key_prefix)
    else:
        assert row.delivery_id == "hdr-1"


async def test_a_failed_handling_is_retried_by_a_redelivery(
    web: Any, deliveries: Any, db_engine: Engine
) -> None:
    poster, _ = web
    payload = example("issues", "labeled")
    payload["installation"] = {"id": 1}
    # A record left "failed" (a handler bug since fixed, a database blip).
    from sqlalchemy import update

    from app.app_tables import WebhookDelivery

    table = WebhookDelivery.__table__  # type: ignore[attr-defined]
    first = await poster.post("issues", payload, delivery="retry-me")
    assert first.status_code == 202
    with db_engine.begin() as conn:
        conn.execute(update(table).values(status="failed"))
    again = await poster.post("issues", payload, delivery="retry-me")
    assert again.status_code == 202 and "handled again" in again.text
    [row] = deliveries()
    assert (row.status, row.attempts) == ("handled", 2)
    once_more = await poster.post("issues", payload, delivery="retry-me")
    assert once_more.status_code == 200
