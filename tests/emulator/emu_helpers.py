"""Types shared by the emulator tests (fixtures that build them live in conftest.py)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy

from emulator.app import Emulator
from emulator.client import AppHandle, EmulatorClient

SECRET = "s3cret"
WEBHOOK_URL = "http://app.test/webhooks"


@dataclass
class Received:
    url: str
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> str:
        return self.headers["X-GitHub-Event"]

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookSink:
    """Records deliveries; answers ``status`` (set it to make deliveries fail), or
    refuses the connection while ``down``."""

    status: int = 202
    down: bool = False
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        with self._lock:
            self.received.append(Received(url, dict(headers), body))
        return self.status, "ok"

    def events(self, event: str, action: str | None = None) -> list[Any]:
        return [
            r.payload
            for r in self.received
            if r.event == event and (action is None or r.payload.get("action") == action)
        ]

    def keys(self) -> list[tuple[str, str | None]]:
        return [(r.event, r.payload.get("action")) for r in self.received]


@dataclass
class World:
    client: EmulatorClient
    emulator: Emulator
    app: AppHandle
    installation_id: int
    owner: str = "octo"
    repo: str = "demo"
    head: str = ""

    def github(self, *, installation_id: int | None = None, **kwargs: Any) -> GitHub[Any]:
        """githubkit as an installation (default: the world's), in-process (ASGI transport)."""
        assert self.app.private_key_pem is not None
        auth = AppInstallationAuthStrategy(
            str(self.app.id), self.app.private_key_pem, installation_id or self.installation_id
        )
        return self._github(auth, **kwargs)

    def app_github(self) -> GitHub[Any]:
        """githubkit as the app itself (JWT)."""
        assert self.app.private_key_pem is not None
        return self._github(AppAuthStrategy(str(self.app.id), self.app.private_key_pem))

    def user_github(self, login: str, **kwargs: Any) -> GitHub[Any]:
        return self._github(TokenAuthStrategy(self.client.tokens[login]), **kwargs)

    def _github(self, auth: Any, **kwargs: Any) -> GitHub[Any]:
        # A fresh cache per client: githubkit's default cache is process-wide and
        # would hand one emulator's installation token to the next test's emulator.
        kwargs.setdefault("auto_retry", False)
        return GitHub(
            auth,
            base_url=self.client.api_url,
            async_transport=httpx.ASGITransport(app=self.emulator.asgi()),
            cache_strategy=MemCacheStrategy(),
            **kwargs,
        )
