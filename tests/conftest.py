"""Shared fixtures: real databases (SQLite file, PostgreSQL) and real Redis."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from app.app_tables import whole_schema
from app.engine._db import make_engine
from app.operations.migrate import upgrade

#: Where the tests that start the whole stack live (tests/e2e, and the
#: benchmarks in tests/bench, which start workers and load them), and the crash tests
#: (tests/engine/test_crash_*.py) that kill worker processes: slow unless
#: marked ``fast``. ``scripts/test --fast`` leaves the slow ones out.
STACK_TESTS = ("e2e", "bench")
CRASH_TESTS = "test_crash_"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        in_stack = any(folder in path.parts for folder in STACK_TESTS)
        whole_stack = in_stack or path.name.startswith(CRASH_TESTS)
        if whole_stack and item.get_closest_marker("fast") is None:
            item.add_marker(pytest.mark.slow)


PG_ADMIN_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
#: The Redis database the tests own (flushed per test); point TEST_REDIS_URL
#: at another database number to run two checkouts' suites side by side.
BASE_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/7")


def worker_redis_url(base: str, worker: str | None) -> str:
    """Under pytest-xdist each worker (``gw0``, ``gw1``...) flushes a Redis
    database of its own: the base's number plus the worker's, wrapping at 16
    (Redis's default count of databases)."""
    if not worker or not worker.startswith("gw"):
        return base
    prefix, _, number = base.rpartition("/")
    return f"{prefix}/{(int(number or 0) + int(worker[2:])) % 16}"


REDIS_URL = worker_redis_url(BASE_REDIS_URL, os.environ.get("PYTEST_XDIST_WORKER"))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file per session; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this session, migrated with Alembic."""
    name = f"repairbot_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    for attempt in range(20):
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            break
        except OperationalError:
            # "template1 is being accessed by other users": another session is
            # creating a database at this instant; try again shortly.
            if attempt == 19:
                raise
            time.sleep(0.25)
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _truncate_all(engine: Engine) -> None:
    names = ", ".join(f'"{t.name}"' for t in whole_schema().sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    """Each test that takes it runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        path = tmp_path / "repairbot.db"
        shutil.copy(sqlite_template, path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    _truncate_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def db_engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
async def redis_url() -> str:
    """A Redis database of its own for this test, emptied first."""
    from redis.asyncio import Redis

    url = REDIS_URL
    client = Redis.from_url(url)
    await client.flushdb()
    await client.aclose()
    return url
