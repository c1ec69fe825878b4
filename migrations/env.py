"""Alembic environment: the URL comes from the caller (``app.operations.migrate``) or,
for the alembic CLI, from DATABASE_URL / the default SQLite file."""

from __future__ import annotations

from alembic import context

from app.app_tables import whole_schema
from app.config import Settings
from app.engine._db import make_engine

config = context.config
url = config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url
engine = make_engine(url)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=whole_schema(),
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
