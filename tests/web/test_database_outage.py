"""The web process while PostgreSQL is unreachable: ``/healthz`` says 503 with
no detail (the detail goes to the log), deliveries get 503 with Retry-After
(GitHub marks them failed; the delivery reconciler has them sent again), and
both recover by themselves. The outage is a TCP proxy in front of the shared
server that is closed and reopened, so the real server is never touched."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.config import Settings
from app.engine._db import make_engine
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.web import create_app
from handlers import build_router
from tests.web.support import SECRET, STAND_INS, Poster, example


class TcpProxy:
    """Forwards a local port to ``target``; ``stop()`` refuses and cuts every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone would not.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[TcpProxy]:
    url = make_url(postgres_url)
    tcp = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    tcp.start()
    yield tcp
    tcp.stop()


@pytest.fixture
async def web(postgres_url: str, proxy: TcpProxy) -> AsyncIterator[Poster]:
    proxied = make_url(postgres_url).set(port=proxy.port).render_as_string(hide_password=False)
    engine = make_engine(proxied)
    runtime = Runtime(engine, Registry.of(STAND_INS))
    app = create_app(Settings(github_webhook_secret=SECRET), runtime, router=build_router())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://repairbot") as client:
        yield Poster(client, SECRET)
    engine.dispose()


async def _health(poster: Poster) -> tuple[int, object]:
    response = await poster.client.get("/healthz")
    return response.status_code, response.json()


@pytest.mark.postgres
async def test_healthz_and_intake_through_a_database_outage(
    web: Poster, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    assert await _health(web) == (200, {"ok": True})

    proxy.stop()
    with caplog.at_level(logging.WARNING, logger="repairbot"):
        status, body = await _health(web)
        assert (status, body) == (503, {"ok": False})  # nothing about hosts or drivers
        payload = example("issues", "labeled")
        response = await web.post("issues", payload, delivery="during-outage")
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) > 0
    assert "database unreachable" in caplog.text  # the detail is in the log
    assert str(proxy.port) in caplog.text or "connection" in caplog.text.lower()

    proxy.start()  # same port: the database is back
    for _ in range(50):  # the pool drops its dead connections on the first tries
        if (await _health(web))[0] == 200:
            break
    assert await _health(web) == (200, {"ok": True})
    again = await web.post("issues", payload, delivery="during-outage")
    assert again.status_code == 202, again.text
    assert json.loads(again.text)["message"]
