"""Serve an ASGI app with uvicorn on a thread of its own, on a socket bound up
front (so its URL is known before anything else is configured)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import uvicorn


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


class ServerThread:
    """``start()`` returns once the server answers; ``stop()`` shuts it down,
    running the app's lifespan shutdown (which stops an in-process runtime)."""

    def __init__(
        self, app: Any, sock: socket.socket, *, name: str = "server", keep_alive: int = 5
    ) -> None:
        self.sock = sock
        self.url = url_of(sock)
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_keep_alive=keep_alive,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self, timeout: float = 20.0) -> ServerThread:
        self.thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout / 0.01)):
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            deadline.wait(0.01)
        raise RuntimeError(f"server at {self.url} did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()
