"""Raw-socket clients for the intake abuse tests: connections that stall at a
chosen point, from a chosen loopback address (Linux routes all of
127.0.0.0/8 to lo, so 127.0.0.2 is a different client than 127.0.0.1)."""

from __future__ import annotations

import json
import re
import socket

import httpx

from app.webhooks.signature import sign
from tests.web.support import SECRET

ATTACKER = "127.0.0.2"


def connect(port: int, source: str = ATTACKER, timeout: float = 60) -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", port), timeout=timeout, source_address=(source, 0)
    )


def head(length: int | None, *, delivery: str = "attack", expect: bool = False) -> bytes:
    lines = [
        "POST /webhooks/github HTTP/1.1",
        "Host: repairbot",
        "Content-Type: application/json",
        "X-GitHub-Event: ping",
        f"X-GitHub-Delivery: {delivery}",
    ]
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    if expect:
        # The server answers "100 Continue" when the app starts reading the
        # body: the attacker's (and the test's) proof that the head was taken.
        lines.append("Expect: 100-continue")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def wait_continue(conn: socket.socket) -> None:
    """Block until the server said ``100 Continue`` on ``conn``. Reads a byte
    at a time, so that an answer sent right after it stays unread."""
    seen = b""
    while not seen.endswith(b"\r\n\r\n"):
        chunk = conn.recv(1)
        assert chunk, f"closed before 100 Continue: {seen!r}"
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 100"), seen


def one_response(conn: socket.socket) -> bytes:
    """One whole response (head and ``Content-Length`` body) off a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head_part, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head_part)
    length = int(found.group(1)) if found else 0
    while len(body) < length:
        chunk = conn.recv(4096)
        assert chunk, "closed mid-body"
        body += chunk
    return head_part + b"\r\n\r\n" + body


def answer(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    conn.close()
    return data


def ping_body(n: int) -> bytes:
    return json.dumps(
        {"zen": "Keep it logically awesome.", "hook_id": n, "sender": {"login": "octo", "id": 1}}
    ).encode()


def genuine(url: str, n: int) -> httpx.Response:
    """A signed delivery, as GitHub sends it (from 127.0.0.1)."""
    body = ping_body(n)
    headers = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": f"genuine-{n}",
        "X-Hub-Signature-256": sign(body, SECRET),
        "Content-Type": "application/json",
    }
    return httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=60)
