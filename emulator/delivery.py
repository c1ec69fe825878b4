"""Signed webhook delivery: a queue, a sender thread, a log, and redelivery.

Delivery is asynchronous, as on GitHub: an API call returns before its
webhooks are sent. One thread sends queued deliveries in order; tests call
:meth:`Dispatcher.wait_idle` (``POST /_emulator/deliveries/wait``) instead of
sleeping. Failures are recorded, never retried on their own; a redelivery is a
new attempt with the same ``X-GitHub-Delivery`` id, as GitHub's "Redeliver".

Chaos controls: ``hold()`` parks new deliveries until ``release(reverse=...)``
(out-of-order arrival); ``duplicate_next(n)`` sends the next ``n`` deliveries
twice with the same delivery id (at-least-once delivery).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

#: (url, headers, body) -> (status code, response text); raises on transport failure.
Sender = Callable[[str, dict[str, str], bytes], tuple[int, str]]


@dataclass
class Delivery:
    id: int
    guid: str
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None
    url: str
    secret: str | None
    hook_id: int
    app_id: int
    body: bytes
    redelivery: bool = False
    status: str = "queued"
    status_code: int = 0
    response: str = ""
    delivered_at: datetime | None = None
    duration: float = 0.0
    request_headers: dict[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        out = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/emulator",
            "X-GitHub-Event": self.event,
            "X-GitHub-Delivery": self.guid,
            "X-GitHub-Hook-ID": str(self.hook_id),
            "X-GitHub-Hook-Installation-Target-ID": str(self.app_id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
        }
        if self.secret:
            key = self.secret.encode()
            out["X-Hub-Signature"] = "sha1=" + hmac.new(key, self.body, hashlib.sha1).hexdigest()
            out["X-Hub-Signature-256"] = (
                "sha256=" + hmac.new(key, self.body, hashlib.sha256).hexdigest()
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """GitHub's ``hook-delivery`` shape, plus the request for inspection."""
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": (self.delivered_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "redelivery": self.redelivery,
            "duration": self.duration,
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": None,
            "url": self.url,
            "request": {
                "headers": self.request_headers or self.headers(),
                "payload": self.payload(),
            },
            "response": {"headers": {}, "payload": self.response},
        }

    def payload(self) -> Any:
        return json.loads(self.body)


def http_sender(timeout: float = 10.0) -> Sender:
    client = httpx.Client(timeout=timeout)

    def send(url: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        resp = client.post(url, headers=headers, content=body)
        return resp.status_code, resp.text[:2000]

    return send


class Dispatcher:
    def __init__(self, sender: Sender | None = None) -> None:
        self._sender = sender
        self._ids = itertools.count(1)
        self._log: list[Delivery] = []
        self._queue: deque[Delivery] = deque()
        self._held: list[Delivery] = []
        self._holding = False
        self._duplicates = 0
        self._busy = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- producing -------------------------------------------------------------

    def new_delivery(self, **fields: Any) -> Delivery:
        with self._cond:
            delivery = Delivery(id=next(self._ids), guid=str(uuid.uuid4()), **fields)
            self._log.append(delivery)
            return delivery

    def enqueue(self, delivery: Delivery) -> None:
        with self._cond:
            copies = [delivery]
            if self._duplicates > 0:
                self._duplicates -= 1
                twin = self._attempt_of(delivery, redelivery=False)
                copies.append(twin)
            if self._holding:
                for d in copies:
                    d.status = "held"
                self._held.extend(copies)
                return
            self._queue.extend(copies)
            self._ensure_thread()
            self._cond.notify_all()

    def _attempt_of(self, original: Delivery, *, redelivery: bool) -> Delivery:
        attempt = Delivery(
            id=next(self._ids),
            guid=original.guid,
            event=original.event,
            action=original.action,
            installation_id=original.installation_id,
            repository_id=original.repository_id,
            url=original.url,
            secret=original.secret,
            hook_id=original.hook_id,
            app_id=original.app_id,
            body=original.body,
            redelivery=redelivery,
        )
        self._log.append(attempt)
        return attempt

    def redeliver(self, delivery_id: int) -> Delivery | None:
        with self._cond:
            original = self.get(delivery_id)
            if original is None:
                return None
            attempt = self._attempt_of(original, redelivery=True)
            self._queue.append(attempt)
            self._ensure_thread()
            self._cond.notify_all()
            return attempt

    # -- chaos -----------------------------------------------------------------

    def hold(self) -> None:
        with self._cond:
            self._holding = True

    def release(self, *, reverse: bool = False) -> int:
        with self._cond:
            held, self._held, self._holding = self._held, [], False
            if reverse:
                held.reverse()
            for d in held:
                d.status = "queued"
            self._queue.extend(held)
            self._ensure_thread()
            self._cond.notify_all()
            return len(held)

    def duplicate_next(self, count: int = 1) -> None:
        with self._cond:
            self._duplicates += count

    # -- reading ---------------------------------------------------------------

    def list(self) -> list[Delivery]:
        with self._cond:
            return list(self._log)

    def get(self, delivery_id: int) -> Delivery | None:
        with self._cond:
            return next((d for d in self._log if d.id == delivery_id), None)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once nothing is queued or in flight (held deliveries don't count)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # -- sending ---------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="webhook-dispatcher", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        sender = self._sender or http_sender()
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                delivery = self._queue.popleft()
                self._busy = True
            self._send(sender, delivery)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    @staticmethod
    def _send(sender: Sender, delivery: Delivery) -> None:
        headers = delivery.headers()
        delivery.request_headers = headers
        started = time.monotonic()
        try:
            code, text = sender(delivery.url, headers, delivery.body)
            delivery.status_code, delivery.response = code, text
            delivery.status = "OK" if 200 <= code < 300 else f"Invalid HTTP Response: {code}"
        except Exception as exc:  # the receiver's failure is data to record, not ours
            delivery.status, delivery.status_code, delivery.response = (
                f"failed to connect: {type(exc).__name__}",
                0,
                str(exc),
            )
        delivery.duration = round(time.monotonic() - started, 3)
        delivery.delivered_at = datetime.now(UTC)
