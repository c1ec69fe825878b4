"""The workflow test kit on a copy of the session's migrated SQLite file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def kit_db_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite database of this test's own."""
    path = tmp_path / "kit.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"
