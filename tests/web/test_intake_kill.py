"""SIGKILL ``repairbot web`` while deliveries are in flight: every delivery it
answered 2xx is in ``webhook_deliveries`` (group commit answers only after
the shared transaction committed); the ones it did not answer may or may not
be, and GitHub's redelivery covers them."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.app_tables import WebhookDelivery
from app.engine._db import make_engine
from app.webhooks.signature import sign
from tests.web.support import EXAMPLES, SECRET

ROOT = Path(__file__).resolve().parents[2]
LANES = 16
#: Answers to wait for before the kill: enough that groups have formed.
ANSWERED_BEFORE_KILL = 150


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_web(db_url: str, data: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "REPAIRBOT_DATA_DIR": str(data),
        "GITHUB_WEBHOOK_SECRET": SECRET,
    }
    env.pop("REDIS_URL", None)  # the jobs wait in the outbox; nothing consumes them here
    log = (data / "web.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.main.cli",
            "--log-level",
            "WARNING",
            "web",
            "--port",
            str(port),
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


async def _healthy(client: httpx.AsyncClient, web: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        assert web.poll() is None, "web exited"
        try:
            if (await client.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("web did not start")


@pytest.mark.slow
async def test_every_delivery_answered_before_sigkill_is_recorded(
    db_url: str, tmp_path: Path
) -> None:
    payloads = [(p.parent.name, p.read_bytes()) for p in sorted(EXAMPLES.glob("*/*.json"))]
    numbers = itertools.count()
    answered: set[str] = set()
    sent = 0
    killed = asyncio.Event()
    port = _free_port()
    web = _start_web(db_url, tmp_path, port)
    limits = httpx.Limits(max_connections=LANES)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30
        ) as client:
            await _healthy(client, web)

            async def lane() -> None:
                nonlocal sent
                while not killed.is_set():
                    n = next(numbers)
                    event, body = payloads[n % len(payloads)]
                    headers = {
                        "X-GitHub-Event": event,
                        "X-GitHub-Delivery": f"kill-{n}",
                        "X-Hub-Signature-256": sign(body, SECRET),
                        "Content-Type": "application/json",
                    }
                    sent += 1
                    try:
                        response = await client.post(
                            "/webhooks/github", content=body, headers=headers
                        )
                    except httpx.TransportError:
                        return  # the server is gone
                    if 200 <= response.status_code < 300:
                        answered.add(f"kill-{n}")

            async def killer() -> None:
                while len(answered) < ANSWERED_BEFORE_KILL:
                    assert web.poll() is None, "web exited"
                    await asyncio.sleep(0.005)
                web.send_signal(signal.SIGKILL)
                killed.set()

            await asyncio.wait_for(asyncio.gather(killer(), *(lane() for _ in range(LANES))), 120)
    finally:
        if web.poll() is None:
            web.kill()
        web.wait()
    assert web.returncode == -signal.SIGKILL

    engine = make_engine(db_url)
    table = WebhookDelivery.__table__  # type: ignore[attr-defined]
    try:
        with engine.connect() as conn:
            recorded = set(conn.execute(select(table.c.delivery_id)).scalars())
    finally:
        engine.dispose()
    assert answered - recorded == set()
    # The kill met deliveries that were sent and not answered: the window this
    # test is about.
    assert sent > len(answered)
