"""Shared fixtures for the emulator's tests.

``world`` is the standard scene: an owner ``octo``, a maintainer ``alice``
(write), a reader ``rita`` (read), a GitHub App (generated key, webhook secret)
installed on ``octo``, and the repository ``octo/demo`` seeded from a folder.
Webhooks go to an in-process :class:`WebhookSink` (a ``Sender``), so tests
read what the app would have received without a server; one test in
``test_webhooks.py`` sends over real HTTP too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from emu_helpers import SECRET, WEBHOOK_URL, WebhookSink, World

from emulator.app import Emulator
from emulator.client import EmulatorClient

BASE_PATH = "/api/v3"


@pytest.fixture
def sink() -> WebhookSink:
    return WebhookSink()


@pytest.fixture
def emulator(tmp_path: Path, sink: WebhookSink) -> Iterator[Emulator]:
    emu = Emulator(root=tmp_path / "emu", base_path=BASE_PATH, sender=sink)
    yield emu
    emu.close()


@pytest.fixture
async def client(emulator: Emulator) -> AsyncIterator[EmulatorClient]:
    transport = httpx.ASGITransport(app=emulator.asgi())
    async with EmulatorClient("http://emulator", base_path=BASE_PATH, transport=transport) as c:
        yield c


@pytest.fixture
def seed_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "seed"
    folder.mkdir()
    (folder / "README.md").write_text("# demo\n")
    (folder / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return folder


@pytest.fixture
async def world(
    client: EmulatorClient, emulator: Emulator, seed_folder: Path, sink: WebhookSink
) -> World:
    await client.create_user("octo")
    await client.create_user("alice", name="Alice", email="alice@example.invalid")
    await client.create_user("rita")
    repo = await client.create_repo_from_folder("octo", "demo", seed_folder)
    await client.set_permission("octo", "demo", "alice", "write")
    await client.set_permission("octo", "demo", "rita", "read")
    app = await client.create_app(name="repairbot", webhook_url=WEBHOOK_URL, webhook_secret=SECRET)
    installation_id = await client.create_installation(app.id, "octo")
    await client.deliveries.wait()
    sink.received.clear()  # tests see only the webhooks they cause
    return World(client, emulator, app, installation_id, head=repo["head"])


@pytest.fixture
def make_branch(world: World) -> Callable[..., Any]:
    """Push a commit on a new or existing branch as ``alice``; returns the push result."""

    async def make(branch: str, files: dict[str, str | None], **kwargs: Any) -> dict[str, Any]:
        return await world.client.push_as("alice", world.owner, world.repo, branch, files, **kwargs)

    return make
