"""A worker's secrets laid out on disk and in its environment, for hostile code to hunt."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.sandbox import Isolation
from app.sandbox.runner import Sandbox
from app.workspace import Workspace, build_workspace, remove_workspace
from tests.agent.sample_repo import (  # noqa: F401
    SampleRepo,
    sample_repo_fixture,
    sample_repo_template_fixture,
)

#: Every secret the hostile code must never print. Distinct strings so a
#: leak names its source.
ENV_SECRETS = {
    "GITHUB_PRIVATE_KEY": "env-private-key-7f3a9c",
    "GITHUB_WEBHOOK_SECRET": "env-webhook-secret-51be20",
    "DATABASE_URL": "postgresql://repairbot:env-db-password-88d1@db/repairbot",
    "REDIS_URL": "redis://:env-redis-password-0c4e@redis:6379/0",
}
KEY_SECRET = "file-private-key-2b7e61"
DB_SECRET = "database-row-secret-9a04fd"
EVIDENCE_SECRET = "evidence-secret-4c3b1e"
SIBLING_SECRET = "sibling-workspace-secret-e6d2a7"
ALL_SECRETS = [*ENV_SECRETS.values(), KEY_SECRET, DB_SECRET, EVIDENCE_SECRET, SIBLING_SECRET]


@dataclass
class Worker:
    """What a worker has: a data directory, a key file, secrets in its environment."""

    data_dir: Path
    key_file: Path
    database: Path
    sibling: Workspace
    sandbox: Sandbox

    def leaked(self, *blobs: bytes | str) -> list[str]:
        text = "".join(b.decode(errors="replace") if isinstance(b, bytes) else b for b in blobs)
        return [secret for secret in ALL_SECRETS if secret in text]


@pytest.fixture(params=["bwrap", "unshare"])
async def worker(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sample_repo: SampleRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Worker]:
    """The worker, with each sandbox backend in turn."""
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)  # as a worker started the old way would hold them
    data_dir = tmp_path / "data"
    (data_dir / "evidence").mkdir(parents=True)
    (data_dir / "evidence" / "artifact").write_text(EVIDENCE_SECRET)
    database = data_dir / "repairbot.db"
    with sqlite3.connect(database) as db:
        db.execute("create table secrets (value text)")
        db.execute("insert into secrets values (?)", (DB_SECRET,))
    db.close()
    key_file = tmp_path / "keys" / "app.pem"
    key_file.parent.mkdir()
    key_file.write_text(KEY_SECRET)
    key_file.chmod(0o600)
    sibling = await build_workspace(
        data_dir / "workspaces",
        clone_url=sample_repo.url,
        base_sha=sample_repo.base_sha,
        patch=None,
    )
    (sibling.repo / "secret.txt").write_text(SIBLING_SECRET)
    isolation = Isolation(mode=request.param, hidden=(data_dir, key_file, Path.home()))
    yield Worker(
        data_dir=data_dir,
        key_file=key_file,
        database=database,
        sibling=sibling,
        sandbox=Sandbox(isolation=isolation, heartbeat_interval=0.1),
    )
    remove_workspace(sibling)


@pytest.fixture
async def workspace(worker: Worker, sample_repo: SampleRepo) -> AsyncIterator[Workspace]:
    """The hostile code's own workspace, beside the sibling."""
    ws = await build_workspace(
        worker.data_dir / "workspaces",
        clone_url=sample_repo.url,
        base_sha=sample_repo.base_sha,
        patch=None,
    )
    yield ws
    remove_workspace(ws)
