"""Fixtures for the GitHub-facing code: an emulator scene, and local git repositories.

REST tests talk to the emulator in-process (``httpx.ASGITransport``); git
tests serve it over real HTTP (the emulator tests' ``serve_asgi``) because
the git CLI needs a socket. Assertions read the emulator's state, never our
own view of it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from gh_scene import BASE_PATH, KeyPair, LocalGit, Scene, git

from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory
from app.github.repos import RepoRef
from emulator.app import Emulator
from emulator.client import EmulatorClient
from emulator.keys import app_key_pair

# serve_asgi lives with the emulator's tests, which are not a package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emulator"))
from git_helpers import serve_asgi


@pytest.fixture(scope="session")
def app_key() -> KeyPair:
    """One RSA key for the whole run: generating one per test costs more than the test."""
    private, public = app_key_pair()
    return KeyPair(private, public)


def _ignore_webhooks(url: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    return 202, "ignored"  # webhook intake is tested elsewhere


@pytest.fixture
def token_ttl() -> timedelta:
    """Installation token lifetime on the emulator (parametrize to override)."""
    return timedelta(hours=1)


@pytest.fixture
def emulator(tmp_path: Path, token_ttl: timedelta) -> Iterator[Emulator]:
    emu = Emulator(
        root=tmp_path / "emu", base_path=BASE_PATH, sender=_ignore_webhooks, token_ttl=token_ttl
    )
    yield emu
    emu.close()


@pytest.fixture
def seed_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "seed"
    folder.mkdir()
    (folder / "README.md").write_text("# demo\n")
    (folder / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return folder


@pytest.fixture
async def scene(emulator: Emulator, seed_folder: Path, app_key: KeyPair) -> AsyncIterator[Scene]:
    transport = httpx.ASGITransport(app=emulator.asgi())
    async with EmulatorClient("http://emulator", base_path=BASE_PATH, transport=transport) as c:
        await c.create_user("octo")
        await c.create_user("alice", name="Alice", email="alice@example.invalid")
        repo = await c.create_repo_from_folder("octo", "demo", seed_folder)
        await c.set_permission("octo", "demo", "alice", "write")
        app = await c.create_app(name="repairbot", public_key_pem=app_key.public_pem)
        installation_id = await c.create_installation(app.id, "octo")
        factory = GitHubClientFactory(
            base_url=c.api_url,
            credentials=AppCredentials(str(app.id), app_key.private_pem),
            transport=httpx.ASGITransport(app=emulator.asgi()),
        )
        yield Scene(
            emulator,
            c,
            app,
            installation_id,
            factory,
            RepoRef("octo", "demo"),
            repo["head"],
            private_key=app_key.private_pem,
        )


@pytest.fixture
def served(scene: Scene) -> Iterator[str]:
    """The same emulator over real HTTP (for the git CLI); yields its base URL."""
    with serve_asgi(scene.emulator.asgi()) as url:
        yield url


@pytest.fixture
def local_git(tmp_path: Path) -> LocalGit:
    work, remote = tmp_path / "work", tmp_path / "remote.git"
    work.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=work)
    (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git("add", "calc.py", cwd=work)
    git("commit", "--quiet", "-m", "initial", cwd=work)
    git("init", "--quiet", "--bare", str(remote), cwd=tmp_path)
    git("push", "--quiet", str(remote), "main", cwd=work)
    return LocalGit(work, remote, git("rev-parse", "HEAD", cwd=work))


@pytest.fixture
def push_branch(scene: Scene) -> Callable[..., Awaitable[str]]:
    """``await push_branch("fix", {"calc.py": "..."})``: commit on a branch as alice; its sha."""

    async def push(branch: str, files: dict[str, str | None], **kwargs: Any) -> str:
        result = await scene.client.push_as("alice", "octo", "demo", branch, files, **kwargs)
        return str(result["sha"])

    return push
