"""Connections on the public port: what happens before a request exists.

uvicorn hands the app a request only once its head (request line and
headers) is complete, and until then nothing bounds a connection: a client
that opens a thousand sockets and sends half a header line on each holds a
thousand file descriptors for as long as it likes. This protocol (uvicorn's
h11 protocol plus two rules) closes that gap:

- the head must be complete within ``header_timeout`` seconds of the
  connection opening or of the previous response (a keep-alive connection
  that starts a new request and stalls is treated the same); the head's size
  is bounded by h11's incomplete-event cap (``MAX_HEADER_BYTES``);
- one client address holds at most ``per_client`` connections at once; the
  next one is answered 503 and closed at once, so one client cannot take every
  descriptor and leave genuine deliveries (from GitHub's addresses) none.

Behind a reverse proxy every connection comes from the proxy's address: set
the per-client cap to 0 there and let the proxy limit its clients (see the
deployment section of README.md).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from app.web.tally import Tally

log = logging.getLogger("repairbot.web.connections")

#: A request head larger than this is refused (h11 answers 431/400). GitHub's
#: delivery heads are about 1 KiB.
MAX_HEADER_BYTES = 16 * 1024
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: 38\r\n\r\n"
    b"too many connections from this address"
)


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    #: Seconds a request head may take to arrive in full.
    header_timeout: float
    #: Connections one client address may hold at once (0: no cap).
    per_client: int


@dataclass
class ConnectionCounts:
    """Open connections per client address (one event loop: plain integers)."""

    open: Tally = field(default_factory=Tally)
    refused: int = 0
    timed_out: int = 0

    def admit(self, client: str, cap: int) -> bool:
        held = self.open.get(client, 0)
        if cap and held >= cap:
            self.refused += 1
            return False
        self.open.add(client)
        return True

    def release(self, client: str) -> None:
        self.open.remove(client)


class CoalescedWrites:
    """A transport whose writes made in one turn of the event loop leave as
    one ``send``: uvicorn writes a response's head and its body separately,
    and on a socket with ``TCP_NODELAY`` each write is a system call, a
    segment and a wakeup of the reader of its own. The bytes go out in order
    at the end of the turn (``call_soon``), or at once before a ``close``;
    once the transport is closing (an ``abort``, the peer gone) they are
    dropped, as its own buffer would be. Everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def guarded_protocol(limits: ConnectionLimits, counts: ConnectionCounts) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a head deadline and a per-client cap
    (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):
        _admitted: str | None = None
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            # A response's head and body in one send (CoalescedWrites).
            super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
            client = self.client[0] if self.client else ""
            if not counts.admit(client, limits.per_client):
                log.warning("connection from %s refused: %d open", client, limits.per_client)
                transport.write(_BUSY)
                transport.close()
                return
            self._admitted = client
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._admitted is not None:
                counts.release(self._admitted)
                self._admitted = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._admitted is None:
                return  # refused: whatever it sends is dropped
            super().data_received(data)
            if self._in_request():
                self._disarm()
            elif self._head_timer is None:
                # Bytes of a next request on a kept-alive connection (idle
                # keep-alive is uvicorn's timeout_keep_alive): its head has the
                # same deadline as the first one's.
                self._arm()

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(limits.header_timeout, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self._in_request() or self.transport.is_closing():
                return
            counts.timed_out += 1
            self.transport.close()

    return GuardedH11Protocol


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (the default
    soft limit, often 1024, is what a thousand idle sockets exhaust). Returns
    the (soft, hard) pair now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit the kernel will not grant
            log.warning("could not raise the open-file limit to %s: %s", hard, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)
