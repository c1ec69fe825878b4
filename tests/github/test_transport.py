"""SharedTransport against real socket servers: a client's close leaves the
shared pool to the requests still using it, and a safe request whose
connection was reset before any answer (SO_LINGER 0) is sent again."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from gh_scene import KeyPair

from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory
from app.github.transport import SharedTransport, safe_to_resend


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
    transport = SharedTransport(httpx.AsyncHTTPTransport())
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


@dataclass
class SlowServer:
    """Answers ``/slow`` after ``delay`` seconds and anything else at once."""

    delay: float
    port: int = 0
    #: Set once a ``/slow`` request has arrived whole (it is then held).
    slow_arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"POST /slow"):
                self.slow_arrived.set()
                await asyncio.sleep(self.delay)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()


async def test_a_client_closing_leaves_the_shared_pool_to_the_others() -> None:
    """githubkit's pattern: a client per request over one transport, closed
    after its request. A mutation still in flight on another client must get
    its answer (it is never resent, so a closed pool would lose it)."""
    state = SlowServer(delay=0.5)
    srv = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    shared = SharedTransport(httpx.AsyncHTTPTransport())
    async with srv:
        slow_client = httpx.AsyncClient(transport=shared, base_url=base)
        slow = asyncio.create_task(slow_client.post("/slow", json={"merge": True}))
        await asyncio.wait_for(state.slow_arrived.wait(), 10)  # the slow request is in
        quick_client = httpx.AsyncClient(transport=shared, base_url=base)
        assert (await quick_client.get("/quick")).status_code == 200
        await quick_client.aclose()  # as githubkit does after each request
        assert (await slow).status_code == 200
        await slow_client.aclose()
        # The pool is still usable after every client closed; the owner closes it.
        again = httpx.AsyncClient(transport=shared, base_url=base)
        assert (await again.get("/quick")).status_code == 200
        await shared.close()


def test_the_factory_gives_every_client_one_shared_transport(app_key: KeyPair) -> None:
    factory = GitHubClientFactory(
        base_url="http://github.invalid", credentials=AppCredentials("1", app_key.private_pem)
    )
    one = factory.for_installation(1, repository="o/a")
    two = factory.for_installation(1, repository="o/b")
    assert one.config.async_transport is two.config.async_transport is factory.transport
    assert factory.app().config.async_transport is factory.transport
    asyncio.run(factory.aclose())
