"""Activities called directly, with real git, real commands and a real evidence store."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent import AgentPolicy
from app.config import Settings
from app.contracts.workspace import WorkspaceSpec
from app.engine._db import make_engine
from app.evidence import DatabaseEvidenceStore, EvidenceStore
from app.sandbox.runner import Sandbox
from tests.activities.support import Dependencies, RecordingContext
from tests.agent.sample_repo import (  # noqa: F401
    SampleRepo,
    sample_repo_fixture,
    sample_repo_template_fixture,
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def evidence(tmp_path: Path, sqlite_template: Path) -> Iterator[EvidenceStore]:
    """The default store: evidence in the (migrated, SQLite) database."""
    path = tmp_path / "evidence.db"
    shutil.copy(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    yield DatabaseEvidenceStore(engine)
    engine.dispose()


@pytest.fixture
def deps(settings: Settings, evidence: EvidenceStore) -> Dependencies:
    # These tests name their agent in the repository's config: allowed here
    # (production allows it only by REPAIRBOT_AGENT_REPOSITORY_COMMANDS).
    policy = AgentPolicy(repository_commands=True)
    return Dependencies(settings, evidence, Sandbox(heartbeat_interval=0.05), policy)


@pytest.fixture
def actx(deps: Dependencies) -> RecordingContext:
    return RecordingContext(deps)


@pytest.fixture(autouse=True)
def no_workspace_survives(settings: Settings) -> Iterator[None]:
    """Every activity removes its workspace, however it ends."""
    yield
    left = list(settings.workspaces_dir.iterdir()) if settings.workspaces_dir.exists() else []
    assert left == [], f"workspaces left behind: {left}"


@pytest.fixture
def spec(sample_repo: SampleRepo) -> WorkspaceSpec:
    return WorkspaceSpec(repo="octo/calc", clone_url=sample_repo.url, base_sha=sample_repo.base_sha)
