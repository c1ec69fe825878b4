"""The Redis channel: JSON jobs only (a pickled job runs nothing), and
``rediss://`` with AUTH in ``REDIS_URL``."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from arq.constants import job_key_prefix
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, ResponseError
from sqlalchemy import Engine

from app.engine._arq_dispatch import ArqConsumers, ArqDispatcher, arq_workers
from app.engine._jobs import DEFAULT_QUEUE
from app.engine._redis_channel import RefusedJob, connect, load_job, redis_settings
from app.engine._runtime import Runtime
from tests.engine.crash_support import CrashLab
from tests.engine.private_services import PrivateRedis, free_port
from tests.engine.test_workflows_basic import REGISTRY

pytestmark = pytest.mark.redis


class _TouchOnLoad:
    """Unpickling this creates a file: the proof that pickle ran code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.path,))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
# An engine job's id (taken by the consumer's own script) and any other id
# (started for arq's run_job): both decode the job with load_job.
@pytest.mark.parametrize("job_id", ["act:evil", "evil"])
async def test_a_pickled_job_written_into_redis_runs_nothing(
    db_engine: Engine,
    redis_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    job_id: str,
) -> None:
    marker = tmp_path / "pickle-ran-code"
    started = await Runtime(db_engine, REGISTRY).start_workflow("sequence", "pickled", 2)
    payload = pickle.dumps(
        {
            "t": 1,
            "f": "run_job",
            # Looks like a real job for a real run, and carries a code payload.
            "a": ("workflow_task", started.run_id, job_id, _TouchOnLoad(marker)),
            "k": {},
            "et": int(time.time() * 1000),
        }
    )
    redis = Redis.from_url(redis_url)
    await redis.set(job_key_prefix + job_id, payload)
    await redis.zadd(DEFAULT_QUEUE, {job_id: int(time.time() * 1000)})

    runtime = Runtime(db_engine, REGISTRY)
    default_queue = arq_workers(
        runtime, redis_settings(redis_url), burst=True, poll_delay=0.01, reconcile_cron=False
    )[0]
    with caplog.at_level(logging.INFO):
        await default_queue.async_run()  # burst: drains the queue, then returns
        await default_queue.close()

    assert not marker.exists(), "unpickling ran code"
    assert any("refused a job that is not JSON" in r.getMessage() for r in caplog.records)
    assert runtime.worker.cache.misses == 0  # no workflow task was run
    # Refused and gone from Redis: not retried, not left to block the queue.
    assert await redis.zcard(DEFAULT_QUEUE) == 0
    assert not await redis.exists(job_key_prefix + job_id)
    run = runtime.store.find_run(started.run_id)
    assert run is not None and run.history_length == 1  # untouched
    await redis.aclose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_an_engine_job_calling_anything_but_run_job_runs_nothing(
    db_engine: Engine, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """JSON of arq's shape under an engine job's id, with run_job's arguments
    for a real run but another function's name: refused, not handed over."""
    started = await Runtime(db_engine, REGISTRY).start_workflow("sequence", "renamed", 2)
    redis = Redis.from_url(redis_url)
    job = {
        "t": 1,
        "f": "reconcile",
        "a": ["workflow_task", started.run_id, "act:1:1"],
        "k": {},
        "et": int(time.time() * 1000),
    }
    await redis.set(job_key_prefix + "act:1:1", json.dumps(job))
    await redis.zadd(DEFAULT_QUEUE, {"act:1:1": int(time.time() * 1000)})
    runtime = Runtime(db_engine, REGISTRY)
    default_queue = arq_workers(
        runtime, redis_settings(redis_url), burst=True, poll_delay=0.01, reconcile_cron=False
    )[0]
    with caplog.at_level(logging.INFO):
        await default_queue.async_run()
        await default_queue.close()
    await runtime.worker.drain(5.0)
    assert any("refused a job that is not a run_job call" in r.getMessage() for r in caplog.records)
    assert runtime.worker.cache.misses == 0  # no workflow task was run
    assert await redis.zcard(DEFAULT_QUEUE) == 0
    await redis.aclose()


def test_jobs_must_be_json_objects_of_arqs_shape() -> None:
    assert load_job(b'{"t":1,"f":"run_job","a":["activity","1","act:1:1"],"k":{},"et":1}')
    pickled, not_an_object, short = b"\x80\x04K\x01.", b"[1,2]", b'{"f":"run_job"}'
    bad_args = b'{"t":1,"f":"x","a":{},"k":{},"et":1}'
    for bad in (pickled, not_an_object, short, bad_args):
        with pytest.raises(RefusedJob):
            load_job(bad)


def _make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl CLI)."""
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
            "-out", str(ca), "-days", "1", "-subj", "/CN=test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_rediss_with_auth_in_the_url_runs_workflows(
    db_engine: Engine, tmp_path: Path
) -> None:
    ca, cert, key = _make_certificates(tmp_path)
    password = "p@ss:w/rd"  # characters a URL must percent-encode
    port = free_port()
    server = PrivateRedis(
        tmp_path / "redis",
        port=port,
        args=["--tls-port", str(port), "--port", "0", "--tls-cert-file", str(cert),
              "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
              "--tls-auth-clients", "no", "--requirepass", password],
    ).start()  # fmt: skip
    url = f"rediss://default:{quote(password, safe='')}@127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    try:
        # The server really wants TLS and the password.
        anonymous = Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca))
        with pytest.raises((AuthenticationError, ResponseError)):
            await anonymous.ping()
        await anonymous.aclose()

        pool = await connect(url)
        runtime = Runtime(db_engine, REGISTRY, relay_grace=0.3, reconcile_interval=0.1)
        runtime.use_dispatcher(ArqDispatcher(pool), eager=False)
        consumers = ArqConsumers(runtime, redis_settings(url), poll_delay=0.01)
        consumers.start()
        runtime.reconciler.start(0.1)
        try:
            await runtime.start_workflow("sequence", "over-tls", 3)
            run = await runtime.wait_for("over-tls", timeout=30)
            assert (run.status, run.result) == ("completed", 3)
        finally:
            await runtime.stop()
            await consumers.stop()
            await pool.aclose()
    finally:
        server.stop()


async def test_a_worker_rides_out_a_redis_restart(tmp_path: Path, db_engine: Engine) -> None:
    """arq's loop dies with Redis; the consumers come back with it, and the
    jobs sent while it was away are relayed from the outbox."""
    server = PrivateRedis(tmp_path / "redis").start()
    pool = await connect(server.url)
    runtime = Runtime(db_engine, REGISTRY, relay_grace=0.3, reconcile_interval=0.1)
    runtime.use_dispatcher(ArqDispatcher(pool), eager=False)
    consumers = ArqConsumers(runtime, redis_settings(server.url), poll_delay=0.01)
    consumers.start()
    runtime.reconciler.start(0.1)
    try:
        await runtime.start_workflow("waiter", "redis-restart")
        await runtime.wait_for("redis-restart", statuses=("running",))
        server.stop()
        # Sent while Redis is down: the dispatch fails quietly, the outbox keeps it.
        await runtime.signal("redis-restart", "approve", {"ok": 1}, dedupe_key="s1")
        await asyncio.sleep(0.5)
        server.start()  # empty: everything Redis held is gone
        run = await runtime.wait_for("redis-restart", timeout=30)
        assert run.status == "completed"
        assert all(not t.done() for t in consumers._tasks), "an arq consumer gave up"
        # The doorbell subscribed again to the new server.
        await asyncio.wait_for(consumers.doorbell.subscribed.wait(), 30)
        assert consumers.doorbell.subscriptions >= 2
    finally:
        await runtime.stop()
        await consumers.stop()
        await pool.aclose()
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_worker_started_while_redis_is_down_waits_for_it(db_url: str, tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")  # not started yet
    try:
        with CrashLab(db_url, tmp_path, redis_url=server.url) as lab:
            worker = lab.spawn("A", arq=True)
            lab.wait_until(
                lambda: "Redis unreachable at start-up" in worker.log(), "a failed connect", 90
            )
            server.start()
            run_id = lab.start("crash_pipeline", "redis-late", {"steps": 2})
            run = lab.wait_settled(run_id, timeout=60)
            assert (run.status, run.result) == ("completed", [0, 1])
            assert worker.popen.poll() is None
    finally:
        server.stop()
