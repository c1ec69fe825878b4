"""Helpers for tests that talk to the emulator over real HTTP, with the real git client.

- :func:`serve_asgi` runs any ASGI app under uvicorn on 127.0.0.1 (a free port)
  in a background thread and yields its base URL.
- :class:`GitClient` runs the ``git`` CLI with an isolated configuration (no
  global or system config, no prompts, a fixed identity). The token travels as
  an ``http.extraHeader`` set through ``GIT_CONFIG_*`` environment variables,
  never in a URL or on the command line.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

#: Author and committer of commits the tests make through the git CLI.
TEST_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
}


class _ThreadedServer(uvicorn.Server):
    """A uvicorn server that says when it is ready to accept connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextmanager
def serve_asgi(app: ASGIApp, *, startup_timeout: float = 10.0) -> Iterator[str]:
    """Serve ``app`` over real HTTP for the duration of the block; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan="off", ws="none", http="h11", log_level="warning", access_log=False
    )
    server = _ThreadedServer(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="serve_asgi", daemon=True
    )
    thread.start()
    try:
        if not server.ready.wait(startup_timeout):
            raise RuntimeError("uvicorn did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(startup_timeout)
        sock.close()


def basic_auth(token: str, username: str = "x-access-token") -> str:
    """The Authorization header value git sends for an installation token."""
    raw = base64.b64encode(f"{username}:{token}".encode()).decode()
    return f"Basic {raw}"


@dataclass(frozen=True)
class GitClient:
    """The git CLI, isolated from the machine's configuration."""

    home: Path
    token: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def with_token(self, token: str | None) -> GitClient:
        return replace(self, token=token)

    def env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.home),
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            **TEST_IDENTITY,
        }
        config = {"init.defaultBranch": "main", "protocol.version": "2"}
        if self.token is not None:
            config["http.extraHeader"] = f"Authorization: {basic_auth(self.token)}"
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for i, (key, value) in enumerate(config.items()):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        env.update(self.extra_env)
        return env

    def run(
        self, *args: str, cwd: Path | None = None, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd or self.home,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"git {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def ls_remote(self, url: str) -> dict[str, str]:
        """Full ref name -> sha, as the server advertises them (HEAD excluded)."""
        out = self.run("ls-remote", "--refs", url).stdout
        return {name: sha for sha, name in (line.split("\t") for line in out.splitlines())}

    def commit_file(self, worktree: Path, path: str, content: str, message: str) -> str:
        """Write a file in a clone, commit it, return the new commit sha."""
        target = worktree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        self.run("add", path, cwd=worktree)
        self.run("commit", "--quiet", "-m", message, cwd=worktree)
        return self.run("rev-parse", "HEAD", cwd=worktree).stdout.strip()
