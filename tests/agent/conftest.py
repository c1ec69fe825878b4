from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.workspace import Workspace, build_workspace, remove_workspace
from tests.agent.sample_repo import SampleRepo, sample_repo_fixture, sample_repo_template_fixture  # noqa: F401


@pytest.fixture
async def workspace(tmp_path: Path, sample_repo: SampleRepo) -> AsyncIterator[Workspace]:
    """A fresh checkout of the sample repository at its buggy base."""
    ws = await build_workspace(
        tmp_path / "workspaces",
        clone_url=sample_repo.url,
        base_sha=sample_repo.base_sha,
        patch=None,
    )
    yield ws
    remove_workspace(ws)
