"""Intake fuzzing: generated deliveries against the real Starlette app.

Headers (event, delivery id, signature variants, content types), encodings,
nesting depth, sizes and signatures are drawn by Hypothesis; delivery ids come
partly from a small pool so redeliveries (same id, same or other body) happen
often. After every request:

- the answer is never a 5xx;
- a correctly signed delivery within the size cap is recorded under its
  delivery key, exactly once however often it is sent;
- an unsigned or wrongly signed one adds no record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from app.app_tables import WebhookDelivery
from app.config import Settings
from app.engine._db import make_engine
from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.intake.pipeline import delivery_key
from app.web import create_app
from app.webhooks.signature import sign
from handlers import build_router
from tests.web.support import EXAMPLES, SECRET, STAND_INS

#: Hypothesis examples, each a batch of deliveries sent at once (so copies of
#: one delivery also race each other).
BATCHES = 500
BATCH = 20
MAX_BYTES = 64 * 1024
table = WebhookDelivery.__table__  # type: ignore[attr-defined]

REAL = [
    (p.parent.name, p.read_bytes()) for p in sorted(EXAMPLES.glob("*/*.json"))
]  # (event, body) as GitHub sent them


POOL = [str(uuid.UUID(int=i)) for i in range(200)]
PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
WEIRD_EVENTS = ["", "ISSUES", "issues ", "e" * 80, "pull request", "issues\t", "star", "ping"]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=utf-16",
    "application/x-www-form-urlencoded",
    "text/plain",
    None,
]
BODY_KINDS = ["real", "reencoded", "mutated", "padded", "nested", "bytes", "json", "form"]
SIGNINGS = ["valid"] * 4 + [
    "upper",
    "padded",
    "wrong-secret",
    "other-body",
    "missing",
    "sha1",
    "truncated",
    "garbage",
]
ID_KINDS = ["uuid", "pool", "uuid", "empty", "missing", "printable", "long"]
EVENT_KINDS = ["real", "real", "known", "weird", "printable"]
KNOWN_EVENTS = sorted({e for e, _ in REAL})

# Each delivery is a handful of Hypothesis choices (what kind of each part)
# plus a seed that fills in the details. Drawing every byte through
# Hypothesis costs ~10 ms a delivery on a loaded machine; this costs ~1.5 ms,
# which is what makes 10,000 deliveries affordable. Failures still shrink on
# the kinds and print the seed.
one_delivery = st.tuples(
    st.sampled_from(BODY_KINDS),
    st.sampled_from(SIGNINGS),
    st.sampled_from(ID_KINDS),
    st.sampled_from(EVENT_KINDS),
    st.sampled_from(CONTENT_TYPES),
    st.integers(0, 2**32),
)


def _nested(depth: int, kind: str, closed: bool) -> bytes:
    opener, closer = {"array": (b"[", b"]"), "object": (b'{"a":', b"}")}[kind]
    return opener * depth + (b"1" + closer * depth if closed else b"")


def _printable(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(PRINTABLE) for _ in range(rng.randint(0, size)))


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([None, True, 0, -1, 2**70, 1.5, "", "x", "\u00e9\u2603", "\x00"])
    if roll < 0.7:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_printable(rng, 6): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _body(rng: random.Random, kind: str) -> tuple[str | None, bytes]:
    """A body and, when it is a real payload, the event it came with."""
    if kind in ("real", "reencoded", "mutated", "padded"):
        event, raw = rng.choice(REAL)
        if kind == "real":
            return event, raw
        payload: Any = json.loads(raw)
        if kind == "mutated":
            key = rng.choice(sorted(payload))
            payload[key] = _json_value(rng)
        if kind == "padded":
            payload["padding"] = "p" * rng.choice([10, 1000, MAX_BYTES // 4, MAX_BYTES])
        text = json.dumps(payload, ensure_ascii=rng.random() < 0.5)
        encoding = rng.choice(["utf-8", "utf-8", "utf-16", "utf-32", "utf-8-sig"])
        return event, text.encode(encoding)
    if kind == "nested":
        depth = rng.choice([1, 10, 999, 1000, 5000, 100_000])
        return None, _nested(depth, rng.choice(["array", "object"]), rng.random() < 0.5)
    if kind == "bytes":
        return None, rng.randbytes(rng.randint(0, 300))
    if kind == "form":
        return None, b"payload=%7B%22action%22%3A%22opened%22%7D"
    return None, json.dumps(_json_value(rng)).encode()


def build(choice: tuple[str, str, str, str, str | None, int]) -> dict[str, Any]:
    body_kind, signing, id_kind, event_kind, content_type, seed = choice
    rng = random.Random(seed)
    real_event, body = _body(rng, body_kind)
    event: str | None = {
        "real": real_event or rng.choice(KNOWN_EVENTS),
        "known": rng.choice(KNOWN_EVENTS),
        "weird": rng.choice(WEIRD_EVENTS),
        "printable": _printable(rng, 20),
    }[event_kind]
    delivery: str | None = {
        "pool": rng.choice(POOL),
        # Fresh each time, as GitHub's are (a seed-derived one would repeat
        # whenever Hypothesis repeats a seed, and it often does).
        "uuid": str(uuid.uuid4()),
        "empty": "",
        "missing": None,
        "printable": _printable(rng, 40),
        "long": "d" * rng.randint(129, 400),
    }[id_kind]
    good = sign(body, SECRET)
    signature = {
        "valid": good,
        "upper": "sha256=" + good.removeprefix("sha256=").upper(),
        "padded": f"  {good} ",
        "wrong-secret": sign(body, "not-the-secret"),
        "other-body": sign(body + b" ", SECRET),
        "missing": None,
        "sha1": "sha1=" + "0" * 40,
        "truncated": good[:-2],
        "garbage": _printable(rng, 80),
    }[signing]
    headers: dict[str, str] = {}
    for name, value in (
        ("X-GitHub-Event", event),
        ("X-GitHub-Delivery", delivery),
        ("X-Hub-Signature-256", signature),
        ("Content-Type", content_type),
    ):
        if value is not None:
            headers[name] = value
    signed = signing in ("valid", "upper", "padded")
    return {"headers": headers, "body": body, "signed": signed, "delivery": delivery}


class Client:
    """Posts to the app in-process (ASGI) from synchronous Hypothesis code."""

    def __init__(self, app: Any) -> None:
        self.loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://repairbot")

    def post_all(self, batch: list[dict[str, Any]]) -> list[httpx.Response]:
        async def send() -> list[httpx.Response]:
            return await asyncio.gather(
                *(
                    self.http.post("/webhooks/github", content=d["body"], headers=d["headers"])
                    for d in batch
                )
            )

        return self.loop.run_until_complete(send())

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


@pytest.fixture
def fuzz_engine(sqlite_template: Path) -> Iterator[Engine]:
    """The migrated SQLite schema on tmpfs when there is one: the suite makes
    thousands of commits, and what it tests is the intake, not the disk."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder:
        path = Path(folder) / "fuzz.db"
        shutil.copy(sqlite_template, path)
        engine = make_engine(f"sqlite:///{path}")
        yield engine
        engine.dispose()


@pytest.fixture
def client(fuzz_engine: Engine) -> Iterator[Client]:
    app_settings = Settings(github_webhook_secret=SECRET, webhook_max_bytes=MAX_BYTES)
    runtime = Runtime(fuzz_engine, Registry.of(STAND_INS))
    test_client = Client(create_app(app_settings, runtime, router=build_router()))
    yield test_client
    test_client.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_generated_deliveries(
    client: Client, fuzz_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    db_engine = fuzz_engine
    # Thousands of refusals are logged as warnings; keep only errors (and the time).
    caplog.set_level(logging.ERROR, logger="repairbot")
    recorded: set[str] = set()
    counts: dict[int, int] = {}
    spent = {"post": 0.0}
    started = time.monotonic()

    def rows(keys: set[str]) -> dict[str, int]:
        with db_engine.connect() as conn:
            found = conn.execute(
                select(table.c.delivery_id, func.count())
                .where(table.c.delivery_id.in_(keys))
                .group_by(table.c.delivery_id)
            ).all()
        return {key: n for key, n in found}

    @settings(
        max_examples=BATCHES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(one_delivery, min_size=BATCH, max_size=BATCH))
    def batch(choices: list[Any]) -> None:
        sent = [build(choice) for choice in choices]
        posting = time.monotonic()
        responses = client.post_all(sent)
        spent["post"] += time.monotonic() - posting
        keys = {delivery_key(d["delivery"], d["body"]) for d in sent}
        for d, response in zip(sent, responses, strict=True):
            counts[response.status_code] = counts.get(response.status_code, 0) + 1
            assert response.status_code < 500, (response.status_code, response.text)
            if len(d["body"]) > MAX_BYTES:
                assert response.status_code == 413
            elif d["signed"]:
                assert response.status_code != 401, response.text
                recorded.add(delivery_key(d["delivery"], d["body"]))
            else:
                assert response.status_code == 401
        # Every signed delivery of the batch is there once; no unsigned one added a key.
        assert rows(keys) == {key: 1 for key in keys if key in recorded}

    batch()
    with db_engine.connect() as conn:
        keys = [r.delivery_id for r in conn.execute(select(table.c.delivery_id))]
    assert sorted(keys) == sorted(recorded)  # nothing unsigned, nothing twice
    total = sum(counts.values())
    print(
        f"{total} deliveries in {time.monotonic() - started:.1f}s "
        f"({spent['post']:.1f}s posting): {sorted(counts.items())}"
    )
    assert total >= BATCHES * BATCH
    # Enough of each outcome that the properties were really exercised.
    assert counts.get(401, 0) > total / 5 and counts.get(400, 0) > total / 25
    assert counts.get(202, 0) > total / 50 and counts.get(200, 0) > total / 50
    assert counts.get(413, 0) > 0
