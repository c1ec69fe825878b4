"""The world GitHub-facing tests run in (the fixtures that build it are in conftest.py)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.github.auth import AppCredentials
from app.github.client import GitHubClientFactory, InstallationGitHub
from app.github.repos import RepoRef
from emulator.app import Emulator
from emulator.client import AppHandle, EmulatorClient
from emulator.state import Repo

#: GHES-style API prefix: proves the configurable base URL carries a path through.
BASE_PATH = "/api/v3"

#: Fixed identity for commits tests make with the git CLI.
TEST_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}


@dataclass
class Scene:
    """``octo/demo`` on an emulator, with the App installed on ``octo`` and a
    maintainer ``alice`` (write access)."""

    emulator: Emulator
    client: EmulatorClient
    app: AppHandle
    installation_id: int
    factory: GitHubClientFactory
    repo: RepoRef
    #: The default branch's commit when the scene was built.
    head: str
    private_key: str = field(repr=False, default="")

    def new_factory(self, base_url: str | None = None, **options: Any) -> GitHubClientFactory:
        """Another factory for the same App: in-process unless ``base_url`` (a served
        emulator) is given; ``options`` as GitHubClientFactory takes them."""
        if base_url is None:
            options.setdefault("transport", httpx.ASGITransport(app=self.emulator.asgi()))
        return GitHubClientFactory(
            base_url=base_url + BASE_PATH if base_url else self.client.api_url,
            credentials=AppCredentials(str(self.app.id), self.private_key),
            **options,
        )

    @property
    def gh(self) -> InstallationGitHub:
        return self.factory.for_installation(self.installation_id)

    @property
    def bot_login(self) -> str:
        return f"{self.app.slug}[bot]"

    def state(self) -> Repo:
        """The emulator's own record of the repository: what GitHub really holds."""
        repo = self.emulator.store.repo(self.repo.owner, self.repo.name)
        assert repo is not None
        return repo


def git(*args: str, cwd: Path, input: bytes | None = None) -> str:
    """The git CLI for test set-up: no user or system config, fixed identity."""
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(cwd),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **TEST_GIT_ENV,
    }
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=input, capture_output=True, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.decode()}")
    return result.stdout.decode().strip()


@dataclass(frozen=True)
class KeyPair:
    private_pem: str
    public_pem: str


@dataclass(frozen=True)
class LocalGit:
    """A work repository with one commit, and a bare repository to push to."""

    work: Path
    remote: Path
    base: str


class Recording(httpx.AsyncBaseTransport):
    """The in-process emulator, with every request's method and path kept."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.seen = inner, []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        return await self.inner.handle_async_request(request)
