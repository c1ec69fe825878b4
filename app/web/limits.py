"""Reading webhook bodies on a public port without being held hostage.

Three limits, each answered before the intake sees a byte:

- size: a body over ``max_bytes`` is refused with 413, from its declared
  ``Content-Length`` when there is one (nothing is read), or as soon as the
  stream passes the cap;
- time: the whole body must arrive within ``read_timeout`` seconds of the
  request's start (408), so a slow sender cannot keep a buffer alive;
- memory across connections: every body's bytes are reserved against one
  budget (``bytes_in_flight``) until its delivery is recorded. A request whose
  declared length does not fit is answered 503 with ``Retry-After`` at once,
  before anything is buffered; a chunked body that outgrows what is left is
  cut off the same way. GitHub marks such deliveries failed and the delivery
  reconciler asks for them again later.

Refusals carry ``Connection: close``: the unread rest of the body is never
consumed, so the connection cannot be reused.
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

from app.metrics import instruments

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


class BodyGate:
    """One per web app: the shared in-flight budget and the read rules.

    The event loop is single-threaded and reservations change only between
    awaits, so a plain integer is an exact account.
    """

    def __init__(self, limits: BodyLimits) -> None:
        self.limits = limits
        self.in_flight = 0
        self.refused: dict[int, int] = {}

    def _reserve(self, size: int) -> bool:
        if self.in_flight + size > self.limits.bytes_in_flight:
            return False
        self.in_flight += size
        instruments().webhook_bytes_in_flight.set(self.in_flight)
        return True

    def _busy(self) -> BodyRefused:
        return BodyRefused(
            503,
            "too many webhook bytes in flight; try again later",
            retry_after=self.limits.read_timeout,
        )

    def _refuse(self, refusal: BodyRefused) -> BodyRefused:
        self.refused[refusal.status] = self.refused.get(refusal.status, 0) + 1
        return refusal

    @asynccontextmanager
    async def body(self, request: Request) -> AsyncIterator[bytes]:
        """The whole body, held against the budget until the block exits.

        Raises :class:`BodyRefused` instead of yielding when a limit is hit;
        whatever was buffered is dropped with it.
        """
        limits = self.limits
        declared = _declared_length(request)
        if declared is not None and declared > limits.max_bytes:
            raise self._refuse(BodyRefused(413, f"payload larger than {limits.max_bytes} bytes"))
        reserved = declared or 0
        if not self._reserve(reserved):
            log.warning(
                "webhook refused: %d bytes in flight, %d more declared", self.in_flight, reserved
            )
            raise self._refuse(self._busy())
        try:
            body = await self._read(request, declared, reserved)
            reserved = max(reserved, len(body))
            yield body
        except _Grown as grown:
            reserved = grown.reserved
            raise
        finally:
            self.in_flight -= reserved
            instruments().webhook_bytes_in_flight.set(self.in_flight)

    async def _read(self, request: Request, declared: int | None, reserved: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > self.limits.max_bytes:
                        raise self._refuse(
                            BodyRefused(413, f"payload larger than {self.limits.max_bytes} bytes")
                        )
                    if size > reserved:
                        if not self._reserve(size - reserved):
                            raise self._refuse(self._busy())
                        reserved = size
                    chunks.append(chunk)
        except BodyRefused as refused:
            raise _Grown(reserved, refused) from None
        except TimeoutError:
            log.warning("webhook body not complete after %.1fs: cut off", self.limits.read_timeout)
            raise _Grown(
                reserved, self._refuse(BodyRefused(408, "request body took too long"))
            ) from None
        except ClientDisconnect:
            raise _Grown(reserved, BodyRefused(400, "client went away mid-body")) from None
        if declared is not None and size != declared:
            raise _Grown(reserved, self._refuse(BodyRefused(400, "body length differs")))
        return b"".join(chunks)


class _Grown(BodyRefused):
    """A refusal raised after the reservation grew: carries the size to release."""

    def __init__(self, reserved: int, refused: BodyRefused) -> None:
        super().__init__(refused.status, refused.message, retry_after=refused.retry_after)
        self.reserved = reserved


def _declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.strip().isdigit():
        raise BodyRefused(400, "malformed Content-Length")
    return int(raw)
