"""Reading webhook bodies on a public port without being held hostage.

Every limit is answered before the intake sees a byte, and none trusts what
the sender declares (the body is unverified until the whole of it is read):

- size: a body over ``max_bytes`` is refused with 413, from its declared
  ``Content-Length`` when there is one (nothing is read), or as soon as the
  stream passes the cap;
- time: the body must start within ``start_timeout`` seconds of the request
  and arrive in full within ``read_timeout`` seconds (408 either way), so a
  sender that declares a body and sends nothing, or trickles it, cannot keep
  a slot or a buffer;
- memory across connections: body bytes are reserved against one budget
  (``bytes_in_flight``) as they ARRIVE, and held until the delivery is
  recorded. A declared length reserves nothing: header-only connections
  declaring 25 MiB each hold no budget at all. A body that outgrows what is
  left is cut off with 503 and ``Retry-After``; GitHub marks the delivery
  failed and the delivery reconciler asks for it again later;
- one client's share: the bytes of the bodies one client address is sending
  are capped (``bytes_per_client``), so a single sender cannot take the
  whole budget and leave genuine deliveries (from GitHub's addresses) none.

Refusals carry ``Connection: close``: the unread rest of the body is never
consumed, so the connection cannot be reused. Connections that never finish
their headers are the protocol's business (app/web/connections.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from app.operations.metrics import instruments
from app.web.tally import Tally

log = logging.getLogger("repairbot.web.limits")


class BodyRefused(Exception):
    """The body will not be read (or not read further); ``response()`` says why."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def response(self) -> Response:
        headers = {"Connection": "close"}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return JSONResponse({"message": self.message}, status_code=self.status, headers=headers)


@dataclass(frozen=True, kw_only=True)
class BodyLimits:
    max_bytes: int
    read_timeout: float
    bytes_in_flight: int
    #: Seconds from the request's start to its first body byte.
    start_timeout: float = 2.0
    #: Body bytes one client address may have in flight at once (0: no cap).
    bytes_per_client: int = 0


class BodyGate:
    """One per web app: the shared in-flight budget and the read rules.

    The event loop is single-threaded and reservations change only between
    awaits, so plain integers are an exact account.
    """

    def __init__(self, limits: BodyLimits) -> None:
        self.limits = limits
        self.in_flight = 0
        #: Client address -> body bytes it has in flight (absent when none).
        self.per_client = Tally()
        self.refused: dict[int, int] = {}

    def _reserve(self, client: str, size: int) -> BodyRefused | None:
        """Take ``size`` more bytes for ``client``; the refusal if they do not fit."""
        held = self.per_client.get(client, 0)
        cap = self.limits.bytes_per_client
        if cap and held + size > cap:
            log.warning("webhook refused: client %s has %d bytes in flight", client, held)
            return self._busy("too many webhook bytes in flight from this address")
        if self.in_flight + size > self.limits.bytes_in_flight:
            log.warning("webhook refused: %d bytes in flight", self.in_flight)
            return self._busy("too many webhook bytes in flight; try again later")
        self.per_client.add(client, size)
        self._account(size)
        return None

    def _release(self, client: str, size: int) -> None:
        if not size:
            return
        self.per_client.remove(client, size)
        self._account(-size)

    def _account(self, change: int) -> None:
        self.in_flight += change
        instruments().webhook_bytes_in_flight.set(self.in_flight)

    def _busy(self, message: str) -> BodyRefused:
        return BodyRefused(503, message, retry_after=self.limits.read_timeout)

    def _refuse(self, refusal: BodyRefused) -> BodyRefused:
        self.refused[refusal.status] = self.refused.get(refusal.status, 0) + 1
        return refusal

    @asynccontextmanager
    async def body(self, request: Request) -> AsyncIterator[bytes]:
        """The whole body, held against the budget until the block exits.

        Raises :class:`BodyRefused` instead of yielding when a limit is hit;
        whatever was buffered is dropped with it.
        """
        declared = _declared_length(request)
        if declared is not None and declared > self.limits.max_bytes:
            raise self._refuse(
                BodyRefused(413, f"payload larger than {self.limits.max_bytes} bytes")
            )
        client = request.client.host if request.client else ""
        held = _Held()
        try:
            yield await self._read(request, client, declared, held)
        finally:
            self._release(client, held.size)

    async def _read(
        self, request: Request, client: str, declared: int | None, held: _Held
    ) -> bytes:
        limits = self.limits
        chunks: list[bytes] = []
        stream = request.stream().__aiter__()
        loop = asyncio.get_running_loop()
        whole_by = loop.time() + limits.read_timeout
        first = True
        try:
            while True:
                # The first chunk has the shorter of the two deadlines: a body
                # that does not start soon is not coming (or is an attack).
                until = min(whole_by, loop.time() + limits.start_timeout) if first else whole_by
                try:
                    async with asyncio.timeout_at(until):
                        chunk = await anext(stream)
                except StopAsyncIteration:
                    break
                first = False
                if held.size + len(chunk) > limits.max_bytes:
                    raise self._refuse(
                        BodyRefused(413, f"payload larger than {limits.max_bytes} bytes")
                    )
                if chunk:
                    refused = self._reserve(client, len(chunk))
                    if refused is not None:
                        raise self._refuse(refused)
                    held.size += len(chunk)
                    chunks.append(chunk)
        except TimeoutError:
            what = "did not start" if first else "not complete"
            log.warning("webhook body %s in time: cut off", what)
            raise self._refuse(BodyRefused(408, "request body took too long")) from None
        except ClientDisconnect:
            raise BodyRefused(400, "client went away mid-body") from None
        if declared is not None and held.size != declared:
            raise self._refuse(BodyRefused(400, "body length differs"))
        return b"".join(chunks)


class _Held:
    """The bytes one body has reserved so far (released when its block exits)."""

    size = 0


def _declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise BodyRefused(400, "malformed Content-Length")
    return int(raw)
