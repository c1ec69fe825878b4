"""A webhook-proxy client, for developing against real GitHub from a laptop.

GitHub cannot reach a laptop. A smee-compatible channel (https://smee.io, or
one you host) can be: the App's webhook URL is the channel, and this client
holds a server-sent-events stream open to it and posts every delivery it
receives to the local intake (``repairbot dev --webhook-proxy URL``).

The channel's event format (smee's): each SSE ``data:`` is a JSON object
whose keys are the original request's headers (lowercased) plus ``body``
(the payload, parsed) and ``query``. The payload is posted as compact JSON,
as smee's own client does: GitHub sends compact JSON, so the bytes, and with
them the ``X-Hub-Signature-256`` the client forwards untouched, match.

The channel is public: anyone who knows its URL can post to it. Nothing is
trusted here: the intake verifies each signature as it does for GitHub
itself, only GitHub's and the signature's headers are forwarded, the
channel's ``query`` is ignored (the target is fixed), and an event larger
than the intake would accept is dropped before it is parsed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

log = logging.getLogger("repairbot.webhook_proxy")

#: The headers worth forwarding: GitHub's own and the signatures.
_FORWARDED = re.compile(r"x-github-[a-z0-9-]+|x-hub-signature(-256)?|content-type|user-agent")


class ProxyError(Exception):
    """The channel cannot be created or used; the message says why."""


@dataclass(frozen=True)
class ProxiedDelivery:
    headers: dict[str, str]
    body: bytes

    @property
    def delivery_id(self) -> str:
        return self.headers.get("x-github-delivery", "-")


def check_channel_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else :class:`ProxyError`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProxyError(f"the webhook proxy URL must be http(s)://host/..., got {url!r}")
    return url


def delivery_of(data: str) -> ProxiedDelivery | None:
    """The delivery one SSE ``data`` carries, or None when it carries none
    (smee's ``ready`` and ``ping`` events, anything that is not a webhook)."""
    try:
        payload = json.loads(data)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(payload, dict) or "body" not in payload:
        return None
    headers = {
        key.lower(): value
        for key, value in payload.items()
        if isinstance(key, str) and isinstance(value, str) and _FORWARDED.fullmatch(key.lower())
    }
    if "x-github-event" not in headers:
        return None
    body = payload["body"]
    if isinstance(body, str):
        raw = body.encode()
    else:
        # Compact, non-ASCII kept: the bytes GitHub sent (see the module docstring).
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers.setdefault("content-type", "application/json")
    return ProxiedDelivery(headers, raw)


async def bounded_lines(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[str | None]:
    """The stream's lines (CR, LF or CRLF); None in place of a line longer
    than ``limit`` bytes, whose bytes are dropped as they arrive."""
    buffer = bytearray()
    too_long = False
    pending_cr = False
    async for chunk in chunks:
        for piece in re.split(rb"(\r\n|\r|\n)", chunk):
            if not piece:
                continue
            if piece in (b"\r\n", b"\r", b"\n"):
                if pending_cr and piece == b"\n" and not buffer and not too_long:
                    pending_cr = False  # the LF of a CRLF split across chunks
                    continue
                pending_cr = piece == b"\r"
                yield None if too_long else buffer.decode("utf-8", "replace")
                buffer.clear()
                too_long = False
                continue
            pending_cr = False
            if too_long:
                continue
            buffer += piece
            if len(buffer) > limit:
                buffer.clear()
                too_long = True


async def sse_events(
    lines: AsyncIterator[str | None], limit: int
) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) per server-sent event (the WHATWG rules: ``data``
    lines joined with newlines, ``:`` comments skipped, a blank line ends an
    event). An event whose data grows past ``limit`` bytes, or holds a line
    too long to read, is dropped whole."""
    name, size, spoiled = "", 0, False
    data: list[str] = []
    async for line in lines:
        if line is None:
            spoiled = True
            continue
        if line == "":
            if data and not spoiled:
                yield name or "message", "\n".join(data)
            elif spoiled:
                log.warning("dropped a webhook-proxy event larger than %d bytes", limit)
            name, data, size, spoiled = "", [], 0, False
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            size += len(value) + 1
            if size > limit:
                spoiled = True
            elif not spoiled:
                data.append(value)


class WebhookProxy:
    """Follows one channel and posts what arrives to ``target`` (the intake)."""

    def __init__(
        self,
        channel_url: str,
        target_url: str,
        client: httpx.AsyncClient,
        *,
        max_event_bytes: int,
        reconnect_delay: float = 1.0,
        max_reconnect_delay: float = 30.0,
        ready_url: str = "",
    ) -> None:
        """``ready_url``: answers 200 once the intake can take deliveries; the
        channel is not followed before (a delivery it sends is not replayed)."""
        self.channel_url = check_channel_url(channel_url)
        self.target_url = target_url
        self.client = client
        # Room for the headers and the JSON framing around the largest body.
        self.limit = max_event_bytes + 64 * 1024
        self.reconnect_delay = reconnect_delay
        self.max_reconnect_delay = max_reconnect_delay
        self.ready_url = ready_url
        #: How many deliveries were handed to the intake (and its answers), for logs.
        self.forwarded = 0

    async def run_forever(self) -> None:
        """Follow the channel; reconnect (backing off) when the stream ends or fails."""
        await self.wait_until_ready()
        delay = self.reconnect_delay
        while True:
            try:
                await self.follow()
                delay = self.reconnect_delay  # a clean end: the channel closed it
            except (httpx.HTTPError, ProxyError) as exc:
                log.warning(
                    "webhook proxy %s: %s; reconnecting in %.0fs", self.channel_url, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_reconnect_delay)

    async def wait_until_ready(self) -> None:
        """Until ``ready_url`` answers 200 (at once without one)."""
        delay = 0.1
        while self.ready_url:
            try:
                if (await self.client.get(self.ready_url, timeout=5.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(delay)  # the local server is still starting
            delay = min(delay * 2, 2.0)

    async def follow(self) -> None:
        """One connection to the channel, until it ends."""
        timeout = httpx.Timeout(10.0, read=120.0)  # smee pings; silence this long is a dead link
        async with self.client.stream(
            "GET", self.channel_url, headers={"Accept": "text/event-stream"}, timeout=timeout
        ) as response:
            if response.status_code != 200:
                raise ProxyError(f"the channel answered {response.status_code}")
            log.info(
                "webhook proxy: receiving %s, forwarding to %s", self.channel_url, self.target_url
            )
            lines = bounded_lines(response.aiter_bytes(), self.limit)
            async for name, data in sse_events(lines, self.limit):
                if name != "message":
                    continue
                delivery = delivery_of(data)
                if delivery is not None:
                    await self.forward(delivery)

    async def forward(self, delivery: ProxiedDelivery, attempts: int = 5) -> int | None:
        """Post one delivery to the intake, as GitHub would have; its status,
        or None when the intake could not be reached."""
        delay = 0.5
        for attempt in range(1, attempts + 1):
            try:
                response = await self.client.post(
                    self.target_url, content=delivery.body, headers=delivery.headers
                )
            except httpx.TransportError as exc:
                if attempt == attempts:
                    log.warning(
                        "webhook proxy: delivery %s not forwarded: %s", delivery.delivery_id, exc
                    )
                    return None
                await asyncio.sleep(delay)  # the local server may still be starting
                delay *= 2
                continue
            self.forwarded += 1
            log.info(
                "webhook proxy: delivery %s (%s) forwarded: %d",
                delivery.delivery_id,
                delivery.headers.get("x-github-event", "-"),
                response.status_code,
            )
            return response.status_code
        return None


async def create_channel(service_url: str, client: httpx.AsyncClient) -> str:
    """A new channel's URL: ``POST <service>/new`` answers a redirect to it."""
    base = check_channel_url(service_url).rstrip("/")
    try:
        response = await client.post(f"{base}/new", follow_redirects=False, timeout=15.0)
    except httpx.HTTPError as exc:
        raise ProxyError(f"cannot reach {base}: {exc}") from None
    location = response.headers.get("location", "")
    if not response.is_redirect or not location:
        raise ProxyError(
            f"{base}/new answered {response.status_code}, not a redirect to a new channel"
        )
    return check_channel_url(urljoin(f"{base}/", location))
