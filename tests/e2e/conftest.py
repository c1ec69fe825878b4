"""End-to-end fixtures: the emulated GitHub and repairbot over real HTTP, with
real webhooks between them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.demo.stack import LocalStack
from tests.e2e.workers import Worker, workers


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    folder = tmp_path / "seed"
    (folder / "slugify").mkdir(parents=True)
    (folder / "slugify" / "__init__.py").write_text("def slugify(text):\n    return text\n")
    (folder / "README.md").write_text("# slugify\n")
    return folder


@pytest.fixture
async def stack(tmp_path: Path, seed: Path, db_url: str) -> AsyncIterator[LocalStack]:
    local = LocalStack(root=tmp_path)
    await local.start_github(seed, database_url=db_url)
    yield local
    await local.stop()


@pytest.fixture(params=["root", "unprivileged"])
def worker(request: pytest.FixtureRequest, tmp_path: Path, db_url: str) -> Iterator[Worker]:
    """The root worker in the stack, then an unprivileged worker process beside it."""
    yield from workers(request, tmp_path, db_url)
