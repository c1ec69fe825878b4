"""The relay sends a lingering job again only when it is not merely waiting in
arq's queue (issue 12): a backlog behind busy workers gets no copies, while a
job that is locked by a dead worker, lost from Redis, or that nobody can ask
about is sent again.

The backlog tests run a real worker process whose pool is full (eight
activities held at a gate) and queue workflows behind it; the job a SIGKILLed
worker left locked is covered in test_crash_arq.py (``before-ack``).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix
from sqlalchemy import Engine, select

from app.engine._arq_dispatch import ArqDispatcher
from app.engine._client import RuntimeClient
from app.engine._jobs import relayed_id, workflow_queue, workflow_task_job
from app.engine._reconciler import Reconciler
from app.engine._redis_channel import connect
from app.engine._store.schema import outbox
from tests.engine.crash_support import CrashLab, by_step
from tests.engine.crash_worker import REGISTRY

pytestmark = pytest.mark.redis

#: The crash worker's pool size: this many held activities leave it no free slot.
POOL = 8
#: Workflows queued behind the full pool.
BACKLOG = 30
#: The relay's grace in these tests: a queued job outlives it many times over.
GRACE = 0.2
PIPELINE = workflow_queue("crash_pipeline", REGISTRY.latest_version("crash_pipeline"))


@pytest.fixture
async def client(db_engine: Engine, redis_url: str) -> AsyncIterator[RuntimeClient]:
    """Starts runs and sends their jobs into Redis, as the web process does."""
    pool = await connect(redis_url)
    client = RuntimeClient(db_engine, REGISTRY)
    client.use_dispatcher(ArqDispatcher(pool))
    yield client
    await pool.aclose()


def _pool(client: RuntimeClient) -> ArqRedis:
    assert isinstance(client.dispatcher, ArqDispatcher)
    return client.dispatcher.pool


# -- the dispatcher's answer -----------------------------------------------------


async def test_only_a_queued_untaken_job_is_waiting(client: RuntimeClient) -> None:
    dispatcher, pool = client.dispatcher, _pool(client)
    assert isinstance(dispatcher, ArqDispatcher)
    queued, locked, keyless, lost = (workflow_task_job(f"r{n}", 1, PIPELINE) for n in range(4))
    await dispatcher.enqueue([queued, locked, keyless])
    # What a worker that took the job and died leaves: arq keeps the job in
    # the queue's sorted set until it finishes, with its in-progress key.
    await pool.psetex(in_progress_key_prefix + locked.job_id, 60_000, b"1")
    # An entry whose job key expired: arq drops it when it gets to it.
    await pool.delete(job_key_prefix + keyless.job_id)
    assert await pool.zscore(PIPELINE, locked.job_id) is not None
    assert await dispatcher.waiting([queued, locked, keyless, lost]) == {queued.job_id}


# -- a backlog behind a busy worker ------------------------------------------------


@dataclass
class Backlog:
    lab: CrashLab
    client: RuntimeClient
    gate: Path
    run_ids: list[str]

    def rows(self) -> dict[str, Any]:
        """The backlog's outbox rows (their first workflow tasks), by run."""
        with self.lab.engine.connect() as conn:
            rows = conn.execute(select(outbox).where(outbox.c.ref.in_(self.run_ids))).all()
        return {r.ref: r for r in rows}

    def wait_looked_at(self, since: dict[str, float], what: str) -> dict[str, Any]:
        """Until the relay has looked at every row again since ``since`` (its
        ``relay_at`` then): every look moves ``relay_at`` on."""

        def looked() -> dict[str, Any] | None:
            rows = self.rows()
            fresh = len(rows) == BACKLOG and all(r.relay_at > since[r.ref] for r in rows.values())
            return rows if fresh else None

        return self.lab.wait_until(looked, what, timeout=30)

    def looked_at_thrice(self) -> dict[str, Any]:
        rows = self.rows()
        for _ in range(3):
            rows = self.wait_looked_at({k: r.relay_at for k, r in rows.items()}, "the relay")
        return rows

    async def queued(self) -> set[str]:
        return {j.decode() for j in await _pool(self.client).zrange(PIPELINE, 0, -1)}

    def finish(self) -> None:
        """Open the gate: every run completes, each step ran once, no row is left."""
        self.gate.touch()
        for run_id in self.run_ids:
            run = self.lab.wait_settled(run_id, timeout=60)
            assert (run.status, run.result) == ("completed", [0, 1])
        ran = {step: len(times) for step, times in by_step(self.lab.record).items()}
        assert ran == {"hold": POOL, "step-0": BACKLOG, "step-1": BACKLOG}
        self.lab.wait_until(lambda: not self.lab.outbox_rows(), "the outbox to empty")


@pytest.fixture
async def backlog(
    db_url: str, tmp_path: Path, redis_url: str, client: RuntimeClient
) -> AsyncIterator[Backlog]:
    with CrashLab(db_url, tmp_path, redis_url=redis_url) as lab:
        gate = tmp_path / "gate"
        lab.spawn("busy", arq=True, gate=gate, relay_grace=GRACE)
        for i in range(POOL):
            await client.start_workflow("crash_long_hold", f"hold-{i}")
        lab.wait_until(lambda: len(lab.record.all()) == POOL, "the pool to fill", timeout=60)
        run_ids = []
        for i in range(BACKLOG):
            started = await client.start_workflow("crash_pipeline", f"queued-{i}", {"steps": 2})
            run_ids.append(started.run_id)
        yield Backlog(lab, client, gate, run_ids)


@pytest.mark.slow
async def test_a_backlog_behind_busy_workers_is_not_sent_again(backlog: Backlog) -> None:
    rows = backlog.looked_at_thrice()
    # The relay looked at each row three times since it fell due (after the
    # grace, then spaced by how long it had waited): without asking Redis it
    # would have sent each again three times (backoff 0.4 s, 0.8 s, ...).
    relays = sorted(r.relays for r in rows.values())
    # The consumer took up to POOL of them out of Redis and waits for a free
    # slot: those the relay cannot tell from a dead worker's, so they are sent
    # again, once (the copy waits in the queue).
    assert relays.count(0) >= BACKLOG - POOL and max(relays) <= 1, relays
    assert not [e for e in backlog.lab.record.all() if e.activity == "square"], "a slot was free"
    # In arq: one job per row, the taken ones' copies in their place.
    sent = {relayed_id(r.job_id, r.relays) for r in rows.values()}
    assert sent == await backlog.queued()
    backlog.finish()


@pytest.mark.slow
async def test_a_backlog_flushed_from_redis_is_sent_again(backlog: Backlog) -> None:
    before = backlog.looked_at_thrice()
    await _pool(backlog.client).flushdb()
    # Every job is gone, the taken ones' in-progress keys too: the relay
    # sends each row again, once.
    resent = backlog.lab.wait_until(
        lambda: _all_sent_once_more(backlog.rows(), before),
        "every row to be sent again",
        timeout=60,
    )
    # The copies wait in the queue: the relay's next look leaves them there.
    after = backlog.wait_looked_at({k: r.relay_at for k, r in resent.items()}, "the relay")
    assert {k: r.relays for k, r in after.items()} == {k: r.relays + 1 for k, r in before.items()}
    assert {relayed_id(r.job_id, r.relays) for r in after.values()} == await backlog.queued()
    backlog.finish()


def _all_sent_once_more(rows: dict[str, Any], before: dict[str, Any]) -> dict[str, Any] | None:
    done = all(r.relays == before[k].relays + 1 for k, r in rows.items())
    return rows if done and len(rows) == BACKLOG else None


# -- a channel that cannot answer ---------------------------------------------------


@contextlib.contextmanager
def _unanswering_redis(kind: str) -> Iterator[int]:
    """A port where no Redis answers: nothing listens (refused), or a socket
    accepts and never replies (silent)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if kind == "silent":
            sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("kind", ["refused", "silent"])
async def test_a_channel_that_cannot_answer_gets_the_job_again(
    client: RuntimeClient, kind: str
) -> None:
    started = await client.start_workflow("crash_pipeline", "unasked", {"steps": 1})
    clock = [time.time() + 1.0]  # past the grace: the start's job lingers in Redis
    asked = Reconciler(
        client.store,
        client.dispatch,
        waiting=client.jobs_waiting,
        relay_grace=GRACE,
        clock=lambda: clock[0],
        threads=client.threads,
    )
    report = await asked.run_once()
    assert (report.jobs_waiting, report.jobs_redispatched) == (1, 0)

    with _unanswering_redis(kind) as port:
        unanswered = ArqDispatcher(ArqRedis(host="127.0.0.1", port=port))
        blind = Reconciler(
            client.store,
            client.dispatch,  # sends into the real Redis
            waiting=unanswered.waiting,
            relay_grace=GRACE,
            clock=lambda: clock[0],
            threads=client.threads,
        )
        clock[0] += 60  # past the relay's next look
        # A silent Redis would hold the pass forever; it is asked for ASK_TIMEOUT.
        report = await blind.run_once()
        await unanswered.pool.aclose()
    assert (report.jobs_waiting, report.jobs_redispatched) == (0, 1)
    with client.engine.connect() as conn:
        row = conn.execute(select(outbox).where(outbox.c.ref == started.run_id)).one()
    assert row.relays == 1
    assert await _pool(client).zscore(PIPELINE, relayed_id(row.job_id, 1)) is not None
