"""Fresh databases, one per case, so no case sees another's rows, indexes or
cache state. SQLite: a file in a temporary directory. PostgreSQL: a new
database on the server, dropped (with FORCE) when the case ends."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from bench.spec import POSTGRES, SQLITE


@contextmanager
def fresh_database(kind: str, *, admin_url: str) -> Iterator[str]:
    """Yield the URL of an empty database of ``kind``; it is gone afterwards."""
    if kind == SQLITE:
        with tempfile.TemporaryDirectory(prefix="repairbot-bench-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}"
    elif kind == POSTGRES:
        with _postgres_database(admin_url) as url:
            yield url
    else:
        raise ValueError(f"unknown database kind {kind!r}")


@contextmanager
def _postgres_database(admin_url: str) -> Iterator[str]:
    name = f"repairbot_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(_psycopg(admin_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield (
                make_url(_psycopg(admin_url))
                .set(database=name)
                .render_as_string(hide_password=False)
            )
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _psycopg(url: str) -> str:
    # Both the runtime and DBOS speak psycopg 3; say so explicitly so SQLAlchemy
    # does not look for psycopg2.
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url
