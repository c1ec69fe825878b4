"""A deploy sends the web process SIGTERM: it stops accepting connections,
finishes the deliveries it is reading, records them, and exits 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.app_tables import WebhookDelivery
from app.engine._db import make_engine
from app.operations.migrate import upgrade
from app.webhooks.signature import sign
from tests.web.support import SECRET

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.slow
def test_sigterm_finishes_the_delivery_in_flight(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path}/web.db"
    upgrade(db_url)
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "REPAIRBOT_DATA_DIR": str(tmp_path),
        "GITHUB_WEBHOOK_SECRET": SECRET,
        "REPAIRBOT_WEBHOOK_READ_TIMEOUT": "60",
    }
    log = (tmp_path / "web.log").open("wb")
    web = subprocess.Popen(
        [sys.executable, "-m", "app.main.cli", "--log-level", "INFO", "web", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert web.poll() is None and time.monotonic() < deadline, "web did not start"
            time.sleep(0.1)

        body = json.dumps(
            {
                "zen": "Keep it logically awesome.",
                "hook_id": 1,
                "sender": {"login": "octo", "id": 1},
            }
        ).encode()
        head = (
            "POST /webhooks/github HTTP/1.1\r\nHost: repairbot\r\n"
            "Content-Type: application/json\r\nX-GitHub-Event: ping\r\n"
            "X-GitHub-Delivery: in-flight-1\r\n"
            f"X-Hub-Signature-256: {sign(body, SECRET)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        conn = socket.create_connection(("127.0.0.1", port), timeout=60)
        half = len(body) // 2
        conn.sendall(head + body[:half])

        web.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not _refused(port):  # shutdown has begun: no new connections
            assert time.monotonic() < deadline, "still accepting after SIGTERM"
            time.sleep(0.05)
        conn.sendall(body[half:])
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        conn.close()
        assert answer.startswith(b"HTTP/1.1 202"), answer
        assert web.wait(timeout=60) == 0
    finally:
        if web.poll() is None:
            web.kill()
            web.wait()
        log.close()

    engine = make_engine(db_url)
    table = WebhookDelivery.__table__  # type: ignore[attr-defined]
    with engine.connect() as db:
        rows = db.execute(select(table.c.delivery_id, table.c.status)).all()
    engine.dispose()
    # Recorded (a ping has no handler: "ignored" is its normal outcome).
    assert [(r.delivery_id, r.status) for r in rows] in (
        [("in-flight-1", "ignored")],
        [("in-flight-1", "handled")],
    )
