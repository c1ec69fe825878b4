"""ResendOnLostConnection against a real socket server that resets connections
with the request unread (SO_LINGER 0), as a server closing an idle keep-alive
connection does when a request meets the close."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from app.github.transport import ResendOnLostConnection, safe_to_resend


@dataclass
class ResettingServer:
    """Answers 200 with the request line, except that the first ``resets``
    connections are reset after the request arrived, unanswered."""

    resets: int
    seen: list[str] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.seen.append(line)
        if self.resets > 0:
            self.resets -= 1
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # RST: the client gets no answer at all
            return
        body = line.encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


@pytest.fixture
async def server() -> AsyncIterator[ResettingServer]:
    state = ResettingServer(resets=0)
    srv = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield state


def client(server: ResettingServer) -> httpx.AsyncClient:
    transport = ResendOnLostConnection(httpx.AsyncHTTPTransport())
    return httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}")


async def test_a_read_is_sent_again_on_a_fresh_connection(server: ResettingServer) -> None:
    server.resets = 2
    async with client(server) as http:
        response = await http.get("/repos/o/r/issues/1/comments")
    assert response.status_code == 200
    assert server.seen == ["GET /repos/o/r/issues/1/comments HTTP/1.1"] * 3


async def test_a_token_mint_is_sent_again(server: ResettingServer) -> None:
    server.resets = 1
    async with client(server) as http:
        response = await http.post("/app/installations/5001/access_tokens", json={})
    assert response.status_code == 200
    assert len(server.seen) == 2


async def test_a_mutation_is_never_sent_twice(server: ResettingServer) -> None:
    server.resets = 1
    async with client(server) as http:
        with pytest.raises(httpx.ReadError):
            await http.patch("/repos/o/r/issues/comments/7", json={"body": "x"})
    assert server.seen == ["PATCH /repos/o/r/issues/comments/7 HTTP/1.1"]


async def test_gives_up_after_its_resends(server: ResettingServer) -> None:
    server.resets = 10
    async with client(server) as http:
        with pytest.raises(httpx.ReadError):
            await http.get("/x")
    assert len(server.seen) == 3  # the request and two resends


@pytest.mark.parametrize(
    ("method", "path", "safe"),
    [
        ("GET", "/repos/o/r", True),
        ("HEAD", "/repos/o/r", True),
        ("POST", "/app/installations/12/access_tokens", True),
        ("POST", "/repos/o/r/issues/1/comments", False),
        ("PUT", "/repos/o/r/pulls/2/merge", False),
        ("DELETE", "/repos/o/r/git/refs/heads/x", False),
        ("POST", "/app/installations/12/access_tokens/extra", False),
    ],
)
def test_what_counts_as_safe(method: str, path: str, safe: bool) -> None:
    assert safe_to_resend(httpx.Request(method, f"http://h{path}")) is safe
