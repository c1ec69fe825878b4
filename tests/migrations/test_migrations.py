"""The Alembic migrations build exactly the schema the models describe, on
SQLite and PostgreSQL, and can be rolled back."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.app_tables import whole_schema
from app.engine.db import make_engine
from app.migrate import downgrade, upgrade


def test_migrations_match_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), whole_schema())
    engine.dispose()
    assert diff == [], f"models and migrations disagree: {diff}"


def test_upgrade_downgrade_upgrade(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    upgrade(url)
    downgrade(url, "base")
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    upgrade(url)
    engine = make_engine(url)
    assert {"workflow_runs", "history_events", "webhook_deliveries"} <= set(
        inspect(engine).get_table_names()
    )
    engine.dispose()
