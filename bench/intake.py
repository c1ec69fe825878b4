"""Intake benchmark: signed GitHub webhook deliveries into ``repairbot web``
(a real process started with ``app.demo.spawn.spawn_repairbot``, real HTTP)
against two anchors in the same run, on SQLite and on PostgreSQL
(``bench.bare_webhook``): a bare Starlette endpoint that only verifies the
signature, and the durable floor, that endpoint plus one committed INSERT of
each delivery before the answer.

    python -m bench.intake [--db sqlite postgres] [--seconds 10] [--in-flight 16]
                           [--rate 100] [--steady-seconds 10]

The payloads are the real ones in tests/data/github/webhooks (every
event and action there, in turn), each delivery with a fresh
``X-GitHub-Delivery``. Figures per server:

- deliveries per second with ``--in-flight`` requests always outstanding
  (closed loop, ``--seconds`` after a warm-up);
- latency at a steady ``--rate`` deliveries per second (open loop: each
  delivery is due at a fixed time and its latency counts from then, so a slow
  answer delays nothing else and hides nothing), p50 and p99;

and, from ``/proc``, the server process's CPU time per delivery in the closed
loop: on a shared machine the rates swing with the neighbours' load, the CPU a
delivery costs much less.

``repairbot web`` records each delivery and routes it to its handler before
it answers; the benchmark counts afterwards that every delivery answered 2xx
is in ``webhook_deliveries`` (and for the durable floor, in its table). Its
jobs go to Redis (a flushed database of their own) with no worker consuming
them. Goal (issue 24): the durable floor's deliveries per second or better on
both databases, p99 under 50 ms at 100 deliveries/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import text

from app.config import Settings
from app.demo.spawn import spawn_repairbot
from app.engine._db import make_engine
from app.operations.migrate import upgrade
from app.webhooks.signature import sign
from bench.bare_webhook import SECRET_ENV
from bench.census import cpu_seconds
from bench.databases import fresh_database
from bench.environment import ROOT, at_start, heading, load
from bench.fleet_setup import add_service_args, empty_redis, run_with_logs
from bench.spec import POSTGRES, SQLITE

PAYLOADS = ROOT / "tests" / "data" / "github" / "webhooks"
#: Issue 24: at least the durable floor's deliveries per second.
RATIO_GOAL = 1.0
P99_GOAL_MS = 50.0
WARMUP = 200


@dataclass(frozen=True)
class Payload:
    event: str
    body: bytes
    signature: str


@dataclass
class ServerFigures:
    server: str
    db: str
    per_second: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    #: Server CPU (user + system) per delivery in the closed loop.
    cpu_ms: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    recorded: int | None = None


def load_payloads(folder: Path, secret: str) -> list[Payload]:
    out = []
    for path in sorted(folder.glob("*/*.json")):
        body = path.read_bytes()
        out.append(Payload(path.parent.name, body, sign(body, secret)))
    if not out:
        raise RuntimeError(f"no payloads under {folder}")
    return out


class Connection:
    """One keep-alive HTTP/1.1 connection with requests written as prepared
    bytes: a lean client, so that on a small machine the load generator's own
    CPU takes as little as possible from the servers it measures (httpx
    costs several times more per request)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def post(self, request: bytes) -> tuple[int, bool]:
        """The answer's status, and whether the server keeps the connection open."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, keep = 0, True
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                keep = False
        await self.reader.readexactly(length)
        return status, keep

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class Sender:
    """Deliveries in turn, each on a free connection; every answer's status counted."""

    def __init__(self, port: int, payloads: list[Payload]) -> None:
        self.port, self.payloads = port, payloads
        self.sent = 0
        self.statuses: Counter[int] = Counter()
        self._idle: list[Connection] = []
        self._all: list[Connection] = []

    def request(self) -> bytes:
        payload = self.payloads[self.sent % len(self.payloads)]
        self.sent += 1
        head = (
            "POST /webhooks/github HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{self.port}\r\n"
            f"X-GitHub-Event: {payload.event}\r\n"
            f"X-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: {payload.signature}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(payload.body)}\r\n\r\n"
        )
        return head.encode() + payload.body

    async def send(self) -> None:
        request = self.request()
        while self._idle:
            conn = self._idle.pop()
            try:
                status, keep = await conn.post(request)
                break
            except (asyncio.IncompleteReadError, ConnectionError):
                # The server closed this idle connection (its keep-alive
                # timeout) before reading the request: send it on another.
                await conn.close()
        else:
            conn = await Connection.open(self.port)
            self._all.append(conn)
            status, keep = await conn.post(request)
        self.statuses[status] += 1
        if keep:
            self._idle.append(conn)

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()


async def closed_loop(sender: Sender, in_flight: int, seconds: float) -> float:
    """Deliveries per second with ``in_flight`` always outstanding."""
    stop = time.perf_counter() + seconds
    done = 0

    async def lane() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await sender.send()
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return done / (time.perf_counter() - started)


async def open_loop(sender: Sender, rate: float, seconds: float) -> list[float]:
    """Latency (ms) of each delivery from the moment it was due."""
    count = int(rate * seconds)
    start = time.perf_counter() + 0.05
    latencies: list[float] = []

    async def one(k: int) -> None:
        due = start + k / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await sender.send()
        latencies.append((time.perf_counter() - due) * 1000)

    await asyncio.gather(*(one(k) for k in range(count)))
    return latencies


async def measure(
    server: subprocess.Popen[bytes],
    port: int,
    payloads: list[Payload],
    args: argparse.Namespace,
    f: ServerFigures,
) -> None:
    sender = Sender(port, payloads)
    try:
        for _ in range(WARMUP // args.in_flight):
            await asyncio.gather(*(sender.send() for _ in range(args.in_flight)))
        # The server's own CPU per delivery: unlike deliveries per second it
        # hardly moves with what else the machine runs.
        cpu, sent = cpu_seconds(server.pid), sender.sent
        f.per_second = await closed_loop(sender, args.in_flight, args.seconds)
        f.cpu_ms = (cpu_seconds(server.pid) - cpu) * 1000 / max(1, sender.sent - sent)
        latencies = await open_loop(sender, args.rate, args.steady_seconds)
    finally:
        await sender.close()
    f.p50_ms = statistics.median(latencies)
    f.p99_ms = statistics.quantiles(latencies, n=100)[98]
    f.statuses = sender.statuses


# -- the servers ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60.0
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited:\n{tail(log)}")
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in 60s:\n{tail(log)}")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def start_bare(argv: list[str], secret: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, SECRET_ENV: secret}
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


@asynccontextmanager
async def serving(process: subprocess.Popen[bytes], log: Path, port: int) -> AsyncIterator[int]:
    """The port of a started server, once healthy; stopped afterwards."""
    try:
        await healthy(f"http://127.0.0.1:{port}/healthz", process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def run_bare(
    args: argparse.Namespace, secret: str, payloads: list[Payload], db: str, tmp: Path
) -> ServerFigures:
    port = free_port()
    argv = [sys.executable, "-m", "bench.bare_webhook", "--port", str(port)]
    figures = ServerFigures("bare", db)
    log = tmp / f"bare-{db}.log"
    process = start_bare(argv, secret, log)
    async with serving(process, log, port):
        await measure(process, port, payloads, args, figures)
    return figures


async def run_floor(
    args: argparse.Namespace, secret: str, payloads: list[Payload], db: str, tmp: Path
) -> ServerFigures:
    """The bare endpoint plus one committed INSERT per delivery (the durable floor)."""
    figures = ServerFigures("durable floor", db)
    with fresh_database(db, admin_url=args.postgres_url) as url:
        port = free_port()
        argv = [sys.executable, "-m", "bench.bare_webhook", "--port", str(port)]
        log = tmp / f"floor-{db}.log"
        process = start_bare([*argv, "--database-url", url], secret, log)
        async with serving(process, log, port):
            await measure(process, port, payloads, args, figures)
        figures.recorded = count_rows(url, "floor_deliveries")
    check_recorded(figures)
    return figures


def count_rows(url: str, table_name: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(f"SELECT count(*) FROM {table_name}")).scalar_one())
    finally:
        engine.dispose()


def check_recorded(figures: ServerFigures) -> None:
    """Every acknowledged delivery must be on record: a server that answers
    without recording is not measured fairly."""
    answered = sum(n for status, n in figures.statuses.items() if 200 <= status < 300)
    if figures.recorded != answered:
        raise RuntimeError(
            f"{figures.server} on {figures.db}: {answered} deliveries acknowledged, "
            f"{figures.recorded} recorded"
        )


async def run_ours(
    args: argparse.Namespace, secret: str, payloads: list[Payload], db: str, tmp: Path
) -> ServerFigures:
    figures = ServerFigures("repairbot web", db)
    with fresh_database(db, admin_url=args.postgres_url) as url:
        upgrade(url)
        await empty_redis(args.redis_url)
        data = tmp / f"data-{db}"
        data.mkdir()
        settings = Settings(
            data_dir=data,
            database_url=url,
            redis_url=args.redis_url,
            github_webhook_secret=secret,
            # One load generator stands for GitHub's many senders: no per-address cap.
            web_connections_per_client=0,
        )
        port = free_port()
        log = tmp / f"web-{db}.log"
        with log.open("ab") as out:
            process = spawn_repairbot(
                ["web", "--host", "127.0.0.1", "--port", str(port)],
                settings,
                log=out,
                log_level="WARNING",
            )
        async with serving(process, log, port):
            await measure(process, port, payloads, args, figures)
        figures.recorded = count_rows(url, "webhook_deliveries")
        await empty_redis(args.redis_url)
    check_recorded(figures)
    return figures


# -- the report -------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.intake", description=__doc__)
    parser.add_argument("--db", nargs="+", choices=[SQLITE, POSTGRES], default=[SQLITE, POSTGRES])
    parser.add_argument("--seconds", type=float, default=10.0, help="closed-loop duration")
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--rate", type=float, default=100.0, help="steady deliveries/s")
    parser.add_argument("--steady-seconds", type=float, default=10.0)
    parser.add_argument("--payloads", type=Path, default=PAYLOADS)
    add_service_args(parser)
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Trio:
    """One database's three servers, measured in the same run."""

    ours: ServerFigures
    floor: ServerFigures
    bare: ServerFigures


async def run(args: argparse.Namespace, tmp: Path) -> list[Trio]:
    secret = secrets.token_hex(20)
    payloads = load_payloads(args.payloads, secret)
    trios = []
    for db in args.db:
        bare = await run_bare(args, secret, payloads, db, tmp)
        print(f"  bare ({db} trio): {bare.per_second:.0f}/s  load {load()}", file=sys.stderr)
        floor = await run_floor(args, secret, payloads, db, tmp)
        print(f"  durable floor on {db}: {floor.per_second:.0f}/s  load {load()}", file=sys.stderr)
        ours = await run_ours(args, secret, payloads, db, tmp)
        print(f"  repairbot web on {db}: {ours.per_second:.0f}/s  load {load()}", file=sys.stderr)
        trios.append(Trio(ours, floor, bare))
    return trios


def table(trios: list[Trio], args: argparse.Namespace) -> str:
    lines = [
        "| database | ours/s | durable floor/s | ours/floor | bare/s | ours/bare "
        f"| p99 ms at {args.rate:g}/s ours / floor / bare "
        "| CPU ms/delivery ours / floor / bare | answers (ours) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for t in trios:
        answers = ", ".join(f"{n}x{status}" for status, n in sorted(t.ours.statuses.items()))
        lines.append(
            f"| {t.ours.db} | {t.ours.per_second:.0f} | {t.floor.per_second:.0f} "
            f"| {t.ours.per_second / t.floor.per_second:.2f}x | {t.bare.per_second:.0f} "
            f"| {t.ours.per_second / t.bare.per_second:.2f}x "
            f"| {t.ours.p99_ms:.1f} / {t.floor.p99_ms:.1f} / {t.bare.p99_ms:.1f} "
            f"| {t.ours.cpu_ms:.2f} / {t.floor.cpu_ms:.2f} / {t.bare.cpu_ms:.2f} | {answers} |"
        )
    return "\n".join(lines)


def verdicts(trios: list[Trio]) -> list[str]:
    out = []
    for t in trios:
        ratio = t.ours.per_second / t.floor.per_second
        ok_ratio = "MET" if ratio >= RATIO_GOAL else "NOT MET"
        ok_p99 = "MET" if t.ours.p99_ms < P99_GOAL_MS else "NOT MET"
        out.append(
            f"{t.ours.db}: {ratio:.2f}x the durable floor -> >= {RATIO_GOAL}x {ok_ratio}; "
            f"p99 {t.ours.p99_ms:.1f} ms -> < {P99_GOAL_MS:g} ms {ok_p99}"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    start = at_start()
    trios = run_with_logs("intake", run, args)
    print(heading("bench.intake", argv, start) + "\n")
    print(table(trios, args))
    print()
    print("\n".join(verdicts(trios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
