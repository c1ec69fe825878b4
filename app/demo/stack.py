"""An emulated GitHub with a repository, an installed App and scripted people,
plus repairbot wired to it: the whole product on one machine, no network.

Used by ``repairbot demo`` and by the end-to-end tests. The repairbot side can
run in this process (embedded mode: web + in-process worker on a server
thread) or be left to the caller (separate worker processes for crash tests).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.demo.serve import ServerThread, bind, url_of
from app.engine import Runtime, make_engine
from app.main.worker_process import WorkerClients, build_runtime, shared_clients
from app.operations.migrate import upgrade
from app.web import create_app
from emulator.app import Emulator
from emulator.client import EmulatorClient, EmulatorError
from emulator.state import DEFAULT_APP_PERMISSIONS
from handlers import build_router

BASE_PATH = "/api/v3"
#: Seconds the emulated GitHub keeps an idle connection open: longer than a
#: client keeps one in its pool (httpx: 5 s), as a real front end's is, so a
#: client never reuses a connection the server is closing at that moment
#: (uvicorn's default is 5 s, the same as the client's).
EMULATOR_KEEP_ALIVE = 75
WEBHOOK_SECRET = "demo-webhook-secret"  # noqa: S105 (the emulated GitHub's, not a real one)


@dataclass
class People:
    owner: str = "octo"
    maintainer: str = "maya"  # write access: her approvals and commands count
    reader: str = "rick"  # read access: ignored, politely
    #: The organization whose forks hold repairbot's proposals (REPAIRBOT_PROPOSAL_OWNER).
    proposals: str = "octo-repairbot"


@dataclass
class LocalStack:
    root: Path
    repo_name: str = "slugify"
    people: People = field(default_factory=People)
    emulator: Emulator | None = None
    client: EmulatorClient | None = None
    settings: Settings | None = None
    runtime: Runtime | None = None
    #: The clients the worker was built with (tests change or read them).
    clients: WorkerClients | None = None
    installation_id: int = 0
    #: Serve the emulated GitHub from a process of its own (as the real one is
    #: on other machines), so that load in this process (a benchmark's
    #: pollers) cannot starve it. Default: a thread of this process.
    emulator_process: bool = False
    _servers: list[ServerThread] = field(default_factory=list)
    _emulator_proc: subprocess.Popen[bytes] | None = None
    _app_socket: socket.socket | None = None

    @property
    def repo(self) -> str:
        return f"{self.people.owner}/{self.repo_name}"

    @property
    def proposal_repo(self) -> str:
        """Where the proposals of :attr:`repo` are pushed: the proposal organization's fork."""
        return f"{self.people.proposals}/{self.repo_name}"

    @property
    def app_url(self) -> str:
        """Where repairbot's web app listens (webhooks, API, dashboard)."""
        assert self._app_socket is not None, "start_github() first"
        return url_of(self._app_socket)

    @property
    def emulator_pid(self) -> int | None:
        """The emulated GitHub's process, when it has one (``emulator_process``)."""
        return self._emulator_proc.pid if self._emulator_proc is not None else None

    @property
    def gh(self) -> EmulatorClient:
        assert self.client is not None, "start_github() first"
        return self.client

    async def start_github(self, source: Path, *, database_url: str | None = None) -> Settings:
        """Start the emulator, create the people, the repository and the App."""
        emu_socket, self._app_socket = bind(), bind()
        emu_url, app_url = url_of(emu_socket), url_of(self._app_socket)
        if self.emulator_process:
            self._emulator_proc = await spawn_emulator(self.root, emu_socket)
        else:
            self.emulator = Emulator(
                root=self.root / "github", base_path=BASE_PATH, public_url=emu_url
            )
            self._servers.append(
                ServerThread(
                    self.emulator.asgi(),
                    emu_socket,
                    name="emulator",
                    keep_alive=EMULATOR_KEEP_ALIVE,
                ).start()
            )
        self.client = EmulatorClient(emu_url, base_path=BASE_PATH)
        people = self.people
        await self.client.create_user(people.owner)
        await self.client.create_user(people.maintainer, name="Maya Maintainer")
        await self.client.create_user(people.reader, name="Rick Reader")
        await self.client.create_repo_from_folder(people.owner, self.repo_name, source)
        await self.client.set_permission(people.owner, self.repo_name, people.maintainer, "write")
        await self.client.set_permission(people.owner, self.repo_name, people.reader, "read")
        await self.client.create_user(people.proposals, type="Organization")
        app = await self.client.create_app(
            name="repairbot",
            webhook_url=f"{app_url}/webhooks/github",
            webhook_secret=WEBHOOK_SECRET,
            # Administration: to fork repositories into the proposal organization.
            permissions={**DEFAULT_APP_PERMISSIONS, "administration": "write"},
        )
        assert app.private_key_pem is not None
        self.installation_id = await self.client.create_installation(app.id, people.owner)
        # On all of the proposal organization's repositories: the forks it makes.
        await self.client.create_installation(app.id, people.proposals)
        data_dir = self.root / "repairbot"
        self.settings = Settings(
            data_dir=data_dir,
            database_url=database_url or "",
            github_api_url=emu_url + BASE_PATH,
            github_git_url=emu_url,
            github_app_id=str(app.id),
            github_private_key=app.private_key_pem,
            github_webhook_secret=WEBHOOK_SECRET,
            github_app_slug=app.slug,
            # Sign-in through the emulator, so the dashboard is there too.
            public_url=app_url,
            github_web_url=emu_url,
            github_client_id=app.client_id,
            github_client_secret=app.client_secret,
            session_secret=secrets.token_urlsafe(32),
            reconcile_interval=0.2,
            worker_id="demo-worker",
            # The installation is created above, before repairbot listens, and the
            # repositories get their config from the test or demo that uses them:
            # onboarding would only race them. tests/e2e/test_onboarding.py turns it on.
            onboarding=False,
            # Unreviewed agent code never lands in a branch of the base repository.
            proposal_owner=people.proposals,
        )
        return self.settings

    def start_repairbot(self, *, run_worker: bool = True, **overrides: Any) -> Runtime:
        """Serve repairbot's web app on its socket; with ``run_worker`` also run
        the in-process worker (the embedded default)."""
        assert self.settings is not None and self._app_socket is not None
        settings = self.settings.with_overrides(**overrides) if overrides else self.settings
        upgrade(settings.database_url)
        engine = make_engine(settings.database_url)
        self.clients = shared_clients(settings, engine)
        self.runtime = build_runtime(settings, self.clients, engine=engine)
        web = create_app(settings, self.runtime, run_worker=run_worker, router=build_router())
        self._servers.append(ServerThread(web, self._app_socket, name="repairbot").start())
        return self.runtime

    def hand_app_port_over(self) -> int:
        """Free repairbot's socket for a ``repairbot web`` process of its own to
        listen on the same port (the App's webhook URL names it); the port."""
        assert self._app_socket is not None, "start_github() first"
        port = int(self._app_socket.getsockname()[1])
        self._app_socket.close()
        return port

    async def add_repo(self, name: str, source: Path) -> str:
        """Another repository of the owner, from ``source``, covered by the App's
        installation; its full name."""
        people = self.people
        await self.gh.create_repo_from_folder(people.owner, name, source)
        await self.gh.set_permission(people.owner, name, people.maintainer, "write")
        await self.gh.set_permission(people.owner, name, people.reader, "read")
        return f"{people.owner}/{name}"

    async def approve_when_awaiting_review(self, reader: Runtime, run_id: str, name: str) -> bool:
        """As the maintainer, approve the draft pull request of run ``run_id``
        (on the owner's repository ``name``) if its status says it awaits
        review; whether it did. A status that cannot be read yet (its history
        is being written) is asked again at the next call."""
        try:
            status = reader.query(run_id, "status")
        except Exception:
            return False
        if status.get("phase") != "awaiting-review" or not status.get("pull_number"):
            return False
        people = self.people
        await self.gh.review(
            people.owner,
            name,
            int(status["pull_number"]),
            as_user=people.maintainer,
            event="APPROVE",
        )
        return True

    async def run_branches(self, repo_name: str | None = None) -> list[str]:
        """repairbot's branches (``repairbot/...``) wherever they are, read from
        GitHub: the proposal fork of the repository, and the repository itself
        (where none should be)."""
        name = repo_name or self.repo_name
        people, found = self.people, []
        for owner in (people.owner, people.proposals):
            try:
                branches = await self.gh.rest(
                    "GET", f"/repos/{owner}/{name}/branches", as_user=owner
                )
            except EmulatorError as exc:
                if exc.status != 404:  # no fork yet
                    raise
                continue
            names = [b["name"] for b in branches if b["name"].startswith("repairbot/")]
            found += [f"{owner}:{branch}" for branch in names]
        return found

    async def stop(self) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()
        if self.client is not None:
            await self.client.aclose()
        if self.emulator is not None:
            self.emulator.close()
        if self._emulator_proc is not None:
            self._emulator_proc.terminate()
            try:
                self._emulator_proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._emulator_proc.kill()
                self._emulator_proc.wait()


async def spawn_emulator(root: Path, sock: socket.socket) -> subprocess.Popen[bytes]:
    """``python -m emulator`` keeping its state under ``root``, on the port
    ``sock`` reserved; returns once it answers."""
    port = int(sock.getsockname()[1])
    proc = _start_emulator_process(root, sock, port)
    url = f"http://127.0.0.1:{port}/"  # any answer means it is serving
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"the emulator exited at start-up (see {root})")
            try:
                await http.get(url)
                return proc
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    proc.kill()
    raise RuntimeError("the emulator did not answer within 30 s")


def _start_emulator_process(root: Path, sock: socket.socket, port: int) -> subprocess.Popen[bytes]:
    """The child serves on ``sock`` itself (inherited), so no other process
    can take the port between our choosing it and the child listening."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "emulator.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "emulator",
                "--port",
                str(port),
                "--fd",
                str(sock.fileno()),
                "--base-path",
                BASE_PATH,
                "--root",
                str(root / "github"),
                "--log-level",
                "warning",
                "--keep-alive",
                str(EMULATOR_KEEP_ALIVE),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(sock.fileno(),),
        )
    sock.close()  # the child holds its own copy
    return proc
