"""The suite's processes (pytest-xdist) never share a Redis database: each
flushes its own before every test that takes one."""

from __future__ import annotations

from tests.conftest import worker_redis_url


def test_each_process_has_its_own_redis_database() -> None:
    base = "redis://127.0.0.1:6379/7"
    urls = {worker_redis_url(base, f"gw{n}") for n in range(4)}
    assert urls == {f"redis://127.0.0.1:6379/{n}" for n in (7, 8, 9, 10)}


def test_the_numbers_wrap_at_redis_s_sixteen_databases() -> None:
    assert worker_redis_url("redis://127.0.0.1:6379/15", "gw2") == "redis://127.0.0.1:6379/1"


def test_one_process_keeps_the_base() -> None:
    base = "redis://:pw@cache:6379/3"
    assert worker_redis_url(base, None) == base
    assert worker_redis_url(base, "master") == base
