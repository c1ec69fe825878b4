"""The composition root gives every activity its body and dependencies
(app/main/worker_process.py): a worker has a body for every contract its
workflows call, with or without a GitHub App."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.config import Settings
from app.engine import PermanentError
from app.main.worker_process import build_runtime, shared_clients


def test_a_worker_without_a_github_app_may_start_and_its_github_use_says_why_it_fails(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "worker.db"
    shutil.copy(sqlite_template, path)
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{path}")
    assert not settings.github_app_id
    runtime = build_runtime(settings)
    try:
        runtime.registry.check_implemented()  # every declared contract has its body
        clients = shared_clients(settings, runtime.engine)
        with pytest.raises(PermanentError, match="no GitHub App: set GITHUB_APP_ID"):
            _ = clients.github.factory
    finally:
        runtime.engine.dispose()
