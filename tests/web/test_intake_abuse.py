"""Each intake guard against abuse, alone, over real sockets to an in-process
uvicorn serving the real app with the real protocol (app/web/connections.py).
The whole attacks against a real ``repairbot web`` process are in
test_intake_attacks.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from sqlalchemy import Engine

from app.config import Settings
from app.demo.serve import ServerThread, bind
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.web import create_app
from app.web.connections import (
    MAX_HEADER_BYTES,
    ConnectionCounts,
    ConnectionLimits,
    guarded_protocol,
)
from handlers import build_router
from tests.web.abuse import (
    ATTACKER,
    answer,
    connect,
    genuine,
    head,
    one_response,
    wait_continue,
)
from tests.web.support import SECRET, parked_command, parked_repair

KIB = 1024
Serve = Callable[..., ServerThread]


@pytest.fixture
def serve(db_engine: Engine) -> Iterator[Serve]:
    """Start the app with these settings (and connection limits) on a real port."""
    started: list[ServerThread] = []

    def start(*, header_timeout: float = 60, per_client: int = 0, **overrides: Any) -> ServerThread:
        settings = Settings(
            github_webhook_secret=SECRET,
            **{
                "webhook_max_bytes": 64 * KIB,
                "webhook_bytes_in_flight": 100 * KIB,
                "webhook_read_timeout": 60,
                "webhook_body_start_timeout": 60,
                "webhook_bytes_per_client": 0,
                **overrides,
            },
        )
        runtime = Runtime(db_engine, Registry.of([parked_repair, parked_command]))
        web = create_app(settings, runtime, router=build_router())
        thread = ServerThread(web, bind(), name="web")
        counts = ConnectionCounts()
        thread.server = uvicorn.Server(
            uvicorn.Config(
                web,
                log_config=None,
                access_log=False,
                lifespan="on",
                http=guarded_protocol(
                    ConnectionLimits(header_timeout=header_timeout, per_client=per_client), counts
                ),
                h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            )
        )
        thread.gate = web.state.body_gate  # type: ignore[attr-defined]
        thread.counts = counts  # type: ignore[attr-defined]
        thread.port = thread.sock.getsockname()[1]  # type: ignore[attr-defined]
        started.append(thread.start())
        return thread

    yield start
    for thread in started:
        thread.stop()


def _settles(read: Callable[[], int], expected: int) -> None:
    """Wait until the server's own account reaches ``expected`` (it reads on its thread)."""
    deadline = time.monotonic() + 20
    while read() != expected:
        assert time.monotonic() < deadline, f"stayed at {read()}, expected {expected}"
        time.sleep(0.01)


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_declared_lengths_reserve_nothing(serve: Serve) -> None:
    """The round-2 attack, scaled: heads declaring 40+40+20 KiB (the whole
    budget) and no body. Only arrived bytes count, so genuine deliveries pass."""
    server = serve()
    held = []
    for size in (40 * KIB, 40 * KIB, 20 * KIB):
        conn = connect(server.port)  # type: ignore[attr-defined]
        conn.sendall(head(size, expect=True))
        wait_continue(conn)  # the app took the head and waits for the body
        held.append(conn)
    assert server.gate.in_flight == 0  # type: ignore[attr-defined]
    answers = [genuine(server.url, n).status_code for n in range(13)]
    assert answers == [202] * 13
    for conn in held:
        conn.close()
    _settles(lambda: server.gate.in_flight, 0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_body_that_does_not_start_is_cut_off(serve: Serve) -> None:
    server = serve(webhook_body_start_timeout=0.3)
    conn = connect(server.port, timeout=20)  # type: ignore[attr-defined]
    conn.sendall(head(1000, expect=True))
    wait_continue(conn)
    raw = answer(conn)  # the read timeout (60 s) is far away: only the start deadline ends it
    assert _status(raw) == 408 and b"connection: close" in raw.lower()
    assert server.gate.refused[408] == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_one_client_cannot_take_the_whole_budget(serve: Serve, deliveries: Any) -> None:
    server = serve(webhook_bytes_per_client=40 * KIB)
    gate = server.gate  # type: ignore[attr-defined]
    first = connect(server.port)  # type: ignore[attr-defined]
    first.sendall(head(60 * KIB, delivery="a-1") + b"x" * (39 * KIB))
    _settles(lambda: gate.in_flight, 39 * KIB)
    second = connect(server.port)  # type: ignore[attr-defined]
    second.sendall(head(60 * KIB, delivery="a-2") + b"x" * (30 * KIB))
    raw = answer(second)
    assert _status(raw) == 503 and b"from this address" in raw
    # GitHub's delivery still fits in what the attacker's address could not take.
    big = genuine(server.url, 1)
    assert big.status_code == 202, big.text
    assert gate.per_client == {ATTACKER: 39 * KIB}
    first.close()
    _settles(lambda: gate.in_flight, 0)
    assert [r.delivery_id for r in deliveries()] == ["genuine-1"]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_head_that_never_completes_is_closed(serve: Serve) -> None:
    # Long enough for a loaded machine to take a prompt head in time (the
    # connection that stalls only waits this long; nothing is timed).
    server = serve(header_timeout=2.0)
    port = server.port  # type: ignore[attr-defined]
    stalled = connect(port, timeout=20)
    stalled.sendall(b"POST /webhooks/github HTTP/1.1\r\nHost: repairbot\r\nX-GitHub-")
    assert answer(stalled) == b""  # closed by the server, without waiting for the rest
    # A kept-alive connection that starts its next head and stalls: the same.
    kept = connect(port, timeout=20)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: repairbot\r\n\r\n")
    assert one_response(kept).startswith(b"HTTP/1.1 200")
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: rep")
    assert answer(kept) == b""
    assert server.counts.timed_out == 2  # type: ignore[attr-defined]
    assert genuine(server.url, 1).status_code == 202


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_connections_per_client_are_capped(serve: Serve) -> None:
    server = serve(per_client=8)
    port = server.port  # type: ignore[attr-defined]
    held = []
    for _ in range(8):
        conn = connect(port)
        conn.sendall(head(100, expect=True))
        wait_continue(conn)  # admitted and in the app
        held.append(conn)
    extra = connect(port, timeout=20)
    raw = answer(extra)
    assert _status(raw) == 503 and b"too many connections" in raw
    assert server.counts.refused == 1  # type: ignore[attr-defined]
    # Another address (GitHub's) is not affected.
    assert genuine(server.url, 1).status_code == 202
    for conn in held:
        conn.close()
    # The attacker's slots come back when its connections close.
    _settles(lambda: server.counts.open.get(ATTACKER, 0), 0)  # type: ignore[attr-defined]
    again = connect(port, timeout=20)
    again.sendall(b"GET /healthz HTTP/1.1\r\nHost: repairbot\r\nConnection: close\r\n\r\n")
    assert _status(answer(again)) == 200


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_oversized_head_is_refused(serve: Serve) -> None:
    server = serve()
    conn = connect(server.port, timeout=20)  # type: ignore[attr-defined]
    conn.sendall(b"POST /webhooks/github HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEADER_BYTES + 1))
    try:
        raw = answer(conn)
    except (TimeoutError, BrokenPipeError):
        raise AssertionError("the oversized head was not refused") from None
    assert _status(raw) == 400
