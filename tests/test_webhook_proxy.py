"""The webhook-proxy client (``repairbot dev --webhook-proxy``) against a small
local channel that behaves as smee.io does: GitHub posts a delivery to the
channel, the channel sends it as a server-sent event (its headers as keys,
the parsed payload as ``body``), the client posts it to the real intake,
whose signature check must pass (issue 22, point 1)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from app.app_tables import WebhookDelivery
from app.config import Settings
from app.demo.serve import ServerThread, bind
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.intake.proxy import (
    ProxyError,
    WebhookProxy,
    bounded_lines,
    create_channel,
    delivery_of,
    sse_events,
)
from app.web import create_app
from app.webhooks.signature import sign
from handlers import build_router
from tests.e2e.scenario import wait_for
from tests.web.support import SECRET, example, parked_command, parked_repair

MAX_BYTES = 64 * 1024


class Channel:
    """A smee-like channel: ``POST /<name>`` publishes, ``GET /<name>`` streams."""

    def __init__(self) -> None:
        self.listeners: list[asyncio.Queue[str]] = []
        self.raw: list[str] = []  # extra raw SSE text sent before each event (tests)
        self.health_checks = 0  # asks of /_down, a server that is not up yet

    def app(self) -> Starlette:
        async def new(request: Request) -> Response:
            return RedirectResponse("/chan-1", status_code=302)

        async def publish(request: Request) -> Response:
            body = await request.body()
            event = {k.lower(): v for k, v in request.headers.items()}
            event |= {"body": json.loads(body), "query": dict(request.query_params)}
            event["timestamp"] = int(time.time() * 1000)
            for queue in self.listeners:
                queue.put_nowait(json.dumps(event))
            return Response("ok")

        async def stream(request: Request) -> Response:
            queue: asyncio.Queue[str] = asyncio.Queue()
            self.listeners.append(queue)

            async def events() -> AsyncIterator[bytes]:
                yield b"event: ready\r\ndata: {}\r\n\r\n"
                try:
                    while True:
                        data = await queue.get()
                        for raw in self.raw:
                            yield raw.encode()
                        yield b": ping\n" + f"data: {data}\n\n".encode()
                finally:
                    self.listeners.remove(queue)

            return StreamingResponse(events(), media_type="text/event-stream")

        async def down(request: Request) -> Response:
            self.health_checks += 1
            return Response("starting", status_code=503)

        return Starlette(
            routes=[
                Route("/_down", down, methods=["GET"]),
                Route("/new", new, methods=["POST"]),
                Route("/{name}", publish, methods=["POST"]),
                Route("/{name}", stream, methods=["GET"]),
            ]
        )


@pytest.fixture
def channel() -> Iterator[tuple[Channel, str]]:
    chan = Channel()
    server = ServerThread(chan.app(), bind(), name="channel").start()
    yield chan, server.url
    server.stop()


@pytest.fixture
def intake(db_engine: Engine) -> Iterator[str]:
    settings = Settings(github_webhook_secret=SECRET)
    runtime = Runtime(db_engine, Registry.of([parked_repair, parked_command]))
    server = ServerThread(create_app(settings, runtime, router=build_router()), bind()).start()
    yield f"{server.url}/webhooks/github"
    server.stop()


def _recorded(engine: Engine) -> list[Any]:
    table = WebhookDelivery.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        return list(conn.execute(select(table)).all())


async def _github_posts(
    channel_url: str, payload: dict[str, Any], delivery: str, **kw: str
) -> None:
    """What GitHub does: compact JSON, signed, with its headers."""
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": kw.get("signature") or sign(body, SECRET),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/abc",
    }
    async with httpx.AsyncClient() as client:
        assert (await client.post(channel_url, content=body, headers=headers)).status_code == 200


@pytest.fixture
async def proxy(channel: tuple[Channel, str], intake: str) -> AsyncIterator[WebhookProxy]:
    chan, base = channel
    async with httpx.AsyncClient() as client:
        relay = WebhookProxy(
            f"{base}/chan-1", intake, client, max_event_bytes=MAX_BYTES, reconnect_delay=0.1
        )
        task = asyncio.create_task(relay.run_forever())
        await wait_for("the proxy is connected", lambda: bool(chan.listeners), timeout=20)
        try:
            yield relay
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_delivery_reaches_the_intake_with_its_signature_intact(
    proxy: WebhookProxy, channel: tuple[Channel, str], db_engine: Engine
) -> None:
    _, base = channel
    payload = example("issues", "opened")
    payload["issue"]["title"] = "Ünïcödé — “quotes” and emoji 🐛"  # bytes must survive
    await _github_posts(f"{base}/chan-1", payload, "proxied-1")
    await wait_for("the delivery is recorded", lambda: len(_recorded(db_engine)) == 1)
    [row] = _recorded(db_engine)
    assert (row.delivery_id, row.event) == ("proxied-1", "issues")
    assert row.status in ("handled", "ignored")


async def test_a_forged_delivery_on_the_public_channel_is_refused(
    proxy: WebhookProxy, channel: tuple[Channel, str], db_engine: Engine
) -> None:
    _, base = channel
    payload = example("issues", "opened")
    await _github_posts(f"{base}/chan-1", payload, "forged", signature="sha256=" + "0" * 64)
    await _github_posts(f"{base}/chan-1", payload, "genuine")
    await wait_for("both were posted to the intake", lambda: proxy.forwarded == 2)
    assert [r.delivery_id for r in _recorded(db_engine)] == ["genuine"]


async def test_an_event_larger_than_the_intake_takes_is_dropped_unread(
    proxy: WebhookProxy, channel: tuple[Channel, str], db_engine: Engine
) -> None:
    chan, base = channel
    # A genuine, signed delivery, but larger than the intake would take: were it
    # read, it would be forwarded and recorded (the intake here takes 25 MB).
    big = example("issues", "opened")
    big["issue"]["body"] = "x" * (MAX_BYTES * 3)
    body = json.dumps(big, separators=(",", ":"))
    event = {
        "x-github-event": "issues",
        "x-github-delivery": "too-big",
        "x-hub-signature-256": sign(body.encode(), SECRET),
        "body": big,
    }
    chan.raw = [f"data: {json.dumps(event)}\n\n"]
    await _github_posts(f"{base}/chan-1", example("issues", "opened"), "after-the-big-one")
    await wait_for("the next delivery is recorded", lambda: len(_recorded(db_engine)) == 1)
    assert _recorded(db_engine)[0].delivery_id == "after-the-big-one"


def test_only_githubs_headers_are_forwarded_and_query_is_ignored() -> None:
    data = json.dumps(
        {
            "host": "smee.io",
            "content-length": "999",
            "x-github-event": "issues",
            "x-github-delivery": "d1",
            "x-hub-signature-256": "sha256=ab",
            "authorization": "Bearer stolen",
            "body": {"a": "é"},
            "query": {"redirect": "http://elsewhere"},
        }
    )
    delivery = delivery_of(data)
    assert delivery is not None
    assert delivery.headers == {
        "x-github-event": "issues",
        "x-github-delivery": "d1",
        "x-hub-signature-256": "sha256=ab",
        "content-type": "application/json",
    }
    assert delivery.body == '{"a":"é"}'.encode()


@pytest.mark.parametrize("data", ["{}", "not json", "[1]", '{"body": {}}', "[" * 100_000])
def test_events_that_are_not_deliveries_are_skipped(data: str) -> None:
    assert delivery_of(data) is None


async def _collect(chunks: list[bytes], limit: int = 100) -> list[tuple[str, str]]:
    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return [e async for e in sse_events(bounded_lines(source(), limit), limit)]


async def test_sse_parsing_follows_the_event_stream_rules() -> None:
    stream = [
        b": comment\r\nevent: ping\r\ndata: 1\r",
        b"\n\r\ndata: a\ndata:b\n\nda",
        b"ta: c\n\n",
    ]
    assert await _collect(stream) == [("ping", "1"), ("message", "a\nb"), ("message", "c")]


async def test_sse_drops_an_event_past_the_limit_whole() -> None:
    stream = [b"data: " + b"y" * 60 + b"\n", b"data: " + b"z" * 60 + b"\n\ndata: ok\n\n"]
    assert await _collect(stream) == [("message", "ok")]


async def test_register_can_create_a_channel(channel: tuple[Channel, str]) -> None:
    _, base = channel
    async with httpx.AsyncClient() as client:
        assert await create_channel(base, client) == f"{base}/chan-1"
        with pytest.raises(ProxyError, match="not a redirect"):
            await create_channel(f"{base}/chan-1", client)  # answers 405, no redirect
        with pytest.raises(ProxyError, match="must be http"):
            await create_channel("file:///etc", client)


@pytest.mark.slow
async def test_repairbot_dev_receives_a_delivery_through_the_channel(
    channel: tuple[Channel, str], tmp_path: Any
) -> None:
    """The whole laptop path: ``repairbot dev --webhook-proxy`` as a real
    process, GitHub posting to the channel, the delivery recorded by dev."""
    import os
    import signal
    import subprocess
    import sys

    from sqlalchemy import create_engine

    chan, base = channel
    port_sock = bind()
    port = port_sock.getsockname()[1]
    port_sock.close()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"REPAIRBOT_DATA_DIR": str(tmp_path), "GITHUB_WEBHOOK_SECRET": SECRET}
    log = (tmp_path / "dev.log").open("wb")
    dev = subprocess.Popen(
        [sys.executable, "-m", "app.main.cli", "dev", "--port", str(port),
         "--webhook-proxy", f"{base}/chan-1"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        await wait_for("dev follows the channel", lambda: bool(chan.listeners), timeout=60)
        await _github_posts(f"{base}/chan-1", example("issues", "opened"), "proxied-cli")
        engine = create_engine(f"sqlite:///{tmp_path / 'repairbot.db'}")
        await wait_for(
            "dev recorded the delivery",
            lambda: [r.delivery_id for r in _recorded(engine)] == ["proxied-cli"],
            timeout=60,
        )
        engine.dispose()
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(timeout=60) == 0
        output = (tmp_path / "dev.log").read_text()
        assert "webhook proxy: delivery proxied-cli (issues) forwarded: 202" in output
        assert "Traceback" not in output
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        log.close()


async def test_the_channel_is_not_followed_before_the_intake_is_up(
    channel: tuple[Channel, str], intake: str
) -> None:
    """A delivery taken from the channel is not replayed: so not before the
    local server answers its health check."""
    chan, base = channel
    async with httpx.AsyncClient() as client:
        proxy = WebhookProxy(
            f"{base}/chan-1", intake, client, max_event_bytes=MAX_BYTES, ready_url=f"{base}/_down"
        )
        waiting = asyncio.create_task(proxy.run_forever())
        try:
            await wait_for("the proxy asked three times", lambda: chan.health_checks >= 3)
            assert chan.listeners == [] and not waiting.done()
        finally:
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
