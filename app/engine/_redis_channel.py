"""Redis as the dispatch channel: connection settings from a URL, and the job
codec.

Jobs travel as JSON, never pickle: arq's default serializer is pickle, so
anyone able to write to Redis could make a worker run code by writing a job.
A job that does not decode as JSON of the expected shape is refused (arq
drops it and logs it; we log it as refused too) and runs nothing.

``REDIS_URL`` may be ``redis://`` or ``rediss://`` (TLS), with a user and
password (percent-encoded, as URLs require) and the database as the path.
TLS options go in the query: ``ssl_cert_reqs`` (``required``, ``optional``,
``none``), ``ssl_ca_certs`` (a CA bundle path), ``ssl_check_hostname``.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from arq import ArqRedis, create_pool
from arq.connections import RedisSettings

log = logging.getLogger("repairbot.dispatch")

#: The keys arq writes for a job (try, function, args, kwargs, enqueue time).
_JOB_KEYS = frozenset({"t", "f", "a", "k", "et"})


class RefusedJob(ValueError):
    """A job in Redis that is not a JSON job of ours: never run."""


def dump_job(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def load_job(raw: bytes) -> dict[str, Any]:
    """Decode a job; anything but a JSON object with arq's keys is refused."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.error("refused a job that is not JSON (%d bytes): %s", len(raw), exc)
        raise RefusedJob("job is not JSON") from exc
    if not isinstance(data, dict) or not data.keys() >= _JOB_KEYS:
        log.error("refused a JSON job of unexpected shape: %.200r", data)
        raise RefusedJob("job has an unexpected shape")
    if not isinstance(data["a"], list) or not isinstance(data["k"], dict):
        log.error("refused a JSON job with malformed arguments: %.200r", data)
        raise RefusedJob("job arguments are malformed")
    return data


def dump_result(data: dict[str, Any]) -> bytes:
    """Results are not kept (``keep_result=0``), but arq serializes them anyway;
    an exception object becomes its text."""
    return json.dumps(data, default=repr, separators=(",", ":")).encode()


def redis_settings(url: str) -> RedisSettings:
    """Settings for ``redis://`` or ``rediss://`` URLs with optional AUTH."""
    parts = urlparse(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"REDIS_URL must start with redis:// or rediss://, not {parts.scheme!r}")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    database = int(query.get("db") or parts.path.lstrip("/") or 0)
    settings = RedisSettings(
        host=parts.hostname or "localhost",
        port=parts.port or 6379,
        database=database,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        ssl=parts.scheme == "rediss",
        conn_timeout=5,
    )
    if "ssl_cert_reqs" in query:
        settings.ssl_cert_reqs = query["ssl_cert_reqs"]
    if "ssl_ca_certs" in query:
        settings.ssl_ca_certs = query["ssl_ca_certs"]
    if "ssl_check_hostname" in query:
        settings.ssl_check_hostname = query["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return settings


def use_json(pool: ArqRedis) -> ArqRedis:
    """Make a pool write and read JSON jobs, whoever created it."""
    pool.job_serializer = dump_job
    pool.job_deserializer = load_job
    return pool


async def connect(url: str) -> ArqRedis:
    """A pool for enqueueing JSON jobs on the Redis at ``url``."""
    return use_json(await create_pool(redis_settings(url), job_serializer=dump_job))
