"""Apply the Alembic migrations to a database (``repairbot migrate``).

The scripts are the ``migrations`` package, shipped in the wheel beside
``app``: they are found through the import system, so an installed
repairbot migrates without a checkout (and a checkout finds its own copy).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config


def script_location() -> Path:
    """The directory holding ``env.py`` and ``versions/``."""
    return Path(str(files("migrations")))


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)
