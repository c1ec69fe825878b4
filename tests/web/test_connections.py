"""CoalescedWrites: a response's writes made in one turn of the event loop
leave as one write to the socket's transport, in order, and never after the
transport is closing."""

from __future__ import annotations

import asyncio
from typing import Any

from app.web.connections import CoalescedWrites


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        #: Written once closing (a real transport would drop them, or worse).
        self.late: list[bytes] = []
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        (self.late if self.closing else self.writes).append(data)

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name == "sockname" else default


async def next_turn() -> None:
    """Let the callbacks scheduled so far (``call_soon``) run."""
    await asyncio.sleep(0)


async def test_writes_of_one_turn_leave_as_one() -> None:
    raw = FakeTransport()
    out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    out.write(b"HTTP/1.1 202 Accepted\r\n\r\n")
    out.write(b"")
    out.write(bytearray(b'{"message":'))
    out.write(memoryview(b'"ok"}'))
    assert raw.writes == []
    assert out.get_write_buffer_size() == len(b'HTTP/1.1 202 Accepted\r\n\r\n{"message":"ok"}')
    await next_turn()
    assert raw.writes == [b'HTTP/1.1 202 Accepted\r\n\r\n{"message":"ok"}']
    out.write(b"next")
    await next_turn()
    assert raw.writes[1:] == [b"next"]


async def test_close_sends_what_is_pending_first() -> None:
    raw = FakeTransport()
    out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    out.write(b"response")
    out.close()
    assert raw.writes == [b"response"] and raw.closing
    await next_turn()
    assert raw.writes == [b"response"] and raw.late == []


async def test_abort_drops_what_is_pending() -> None:
    raw = FakeTransport()
    out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    out.write(b"response")
    out.abort()
    await next_turn()
    assert raw.writes == raw.late == [] and raw.aborted


async def test_a_transport_closed_meanwhile_gets_no_late_write() -> None:
    raw = FakeTransport()
    out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    out.write(b"response")
    raw.close()  # the peer went away (connection_lost) before the turn ended
    await next_turn()
    assert raw.writes == raw.late == []


async def test_everything_else_is_the_transports() -> None:
    raw = FakeTransport()
    out = CoalescedWrites(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    assert out.get_extra_info("sockname") == ("127.0.0.1", 8000)
    assert not out.is_closing()
