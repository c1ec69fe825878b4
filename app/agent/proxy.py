"""The model proxy: agents reach their model API without ever holding a key.

repairbot runs this HTTP server in the worker process, outside the sandbox,
on a unix socket (the sandbox sees it as ``127.0.0.1:PORT`` through the
sandbox's socket forward). For each agent attempt the worker *grants* one
upstream (a provider's base URL and the operator's key bound to it) and
gets a random token back; the agent holds only that token. The proxy:

- accepts a request only with a token it granted and has not revoked
  (``Authorization: Bearer <token>`` as OpenAI clients send it, or
  ``x-api-key: <token>`` as Anthropic clients do); the grant ends with the
  attempt (:meth:`ModelProxy.attempt`), so a token copied out of the sandbox
  is worthless afterwards;
- forwards it to that grant's base URL only (the path is appended under the
  base URL's path; ``..``, ``%`` escapes and absolute forms are refused), so
  a key configured for provider X is never sent anywhere else, whatever the
  agent asks for;
- drops every header the agent sent except a short allow-list, adds the
  real credential itself, follows no redirects, and caps request bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.agent.http import ANTHROPIC_VERSION

#: Where the sandbox reaches the proxy (its unix socket forwarded to this port).
DEFAULT_PROXY_ADDRESS = "http://127.0.0.1:8089"
#: Largest request an agent may send through the proxy.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: Request headers passed on to the provider; everything else is dropped.
FORWARDED_HEADERS = frozenset(
    {"content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta"}
)
#: Response headers passed back to the agent.
RETURNED_HEADERS = frozenset(
    {"content-type", "retry-after", "retry-after-ms", "x-request-id", "request-id"}
)


@dataclass(frozen=True)
class Upstream:
    """Where one grant's requests go, and the credential added to them."""

    provider: Literal["openai", "anthropic"]
    #: The base URL the key is bound to (no trailing slash).
    base_url: str
    api_key: str = field(repr=False)

    def auth_headers(self) -> dict[str, str]:
        if self.provider == "openai":
            return {"authorization": f"Bearer {self.api_key}"}
        return {"x-api-key": self.api_key}


def _digest(token: str) -> str:
    # Grants are looked up by a hash: no comparison leaks a token's prefix.
    return hashlib.sha256(token.encode()).hexdigest()


class _QuietServer(uvicorn.Server):
    """uvicorn inside the worker's loop: the worker owns the signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ModelProxy:
    def __init__(
        self,
        socket_path: Path | None = None,
        *,
        client: httpx.AsyncClient,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        # Default: a private directory made at start (unix socket paths are
        # short, so not under a deep data directory).
        self._given_path = socket_path
        self.socket_path = Path(socket_path) if socket_path else Path()
        self.max_request_bytes = max_request_bytes
        self.client = client
        self._grants: dict[str, Upstream] = {}
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.app = Starlette(
            routes=[
                Route(
                    "/{path:path}",
                    self._forward,
                    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                )
            ]
        )

    # -- grants ---------------------------------------------------------------

    def grant(self, upstream: Upstream) -> str:
        """A new random token that reaches ``upstream`` until revoked."""
        token = "rbp-" + secrets.token_urlsafe(32)
        self._grants[_digest(token)] = upstream
        return token

    def revoke(self, token: str) -> None:
        self._grants.pop(_digest(token), None)

    @contextlib.asynccontextmanager
    async def attempt(self, upstream: Upstream) -> AsyncIterator[str]:
        """A token for one agent attempt, revoked when the attempt ends however
        it ends. Starts the server on first use (it needs the worker's loop)."""
        if self._server is None:
            await self.start()
        token = self.grant(upstream)
        try:
            yield token
        finally:
            self.revoke(token)

    # -- serving --------------------------------------------------------------

    async def start(self) -> None:
        if self._given_path is None:
            self.socket_path = Path(tempfile.mkdtemp(prefix="repairbot-proxy-")) / "model.sock"
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.socket_path))
        # The sandbox's forwarder connects as the sandbox user (another uid):
        # the socket is open to all, the private 0700 directory around it is
        # what keeps other local users out (and a request still needs a token).
        self.socket_path.chmod(0o666)
        sock.listen(64)
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off", timeout_keep_alive=5
        )
        self._server = _QuietServer(config)
        self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the model proxy stopped while starting")
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self._grants.clear()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self.socket_path.unlink(missing_ok=True)
        if self._given_path is None and self._server is not None:
            with contextlib.suppress(OSError):
                self.socket_path.parent.rmdir()  # the private directory start() made

    async def __aenter__(self) -> ModelProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- one request ----------------------------------------------------------

    def _upstream_of(self, request: Request) -> Upstream | None:
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        token = token or request.headers.get("x-api-key", "").strip()
        return self._grants.get(_digest(token)) if token else None

    async def _forward(self, request: Request) -> Response:
        upstream = self._upstream_of(request)
        if upstream is None:
            return _error(401, "unknown or expired repairbot model token")
        path = request.path_params["path"]
        raw_path = request.scope.get("raw_path", b"").decode(errors="replace")
        segments = path.split("/")
        if "%" in raw_path or any(s in ("..", ".") for s in segments) or "//" in path:
            return _error(400, "path not allowed")
        cap = self.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            return _error(413, f"request larger than {cap} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > cap:
                return _error(413, f"request larger than {cap} bytes")
        base = httpx.URL(upstream.base_url)
        url = base.copy_with(
            path=base.path.rstrip("/") + "/" + path, query=request.url.query.encode() or None
        )
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        if upstream.provider == "anthropic":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
        headers.update(upstream.auth_headers())
        outgoing = self.client.build_request(
            request.method, url, headers=headers, content=bytes(body)
        )
        try:
            answer = await self.client.send(outgoing, stream=True, follow_redirects=False)
        except httpx.TransportError as exc:
            return _error(502, f"the model API is unreachable: {type(exc).__name__}")
        returned = {k: v for k, v in answer.headers.items() if k.lower() in RETURNED_HEADERS}

        async def relay() -> AsyncIterator[bytes]:
            try:
                # Decoded: no content-encoding header is passed back.
                async for chunk in answer.aiter_bytes():
                    yield chunk
            finally:
                await answer.aclose()

        return StreamingResponse(relay(), status_code=answer.status_code, headers=returned)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "repairbot_proxy"}}, status)
