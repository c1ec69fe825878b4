"""Private Redis and PostgreSQL servers a test may stop, restart and flush.

The shared servers on the default ports belong to every suite running on the
machine: a test that needs to take a database away starts its own instance
in a temporary directory on a free port. PostgreSQL refuses to run as root,
so when the tests run as root the cluster belongs to the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path(os.environ.get("TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, *, up: bool, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} did not go {'up' if up else 'down'} in {timeout}s")


class PrivateRedis:
    """``redis-server`` on a free port, no persistence: a restart loses everything."""

    def __init__(self, workdir: Path, *, port: int | None = None, args: list[str] | None = None):
        self.workdir = workdir
        self.port = port or free_port()
        self.args = args or []
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        log = (self.workdir / "redis.log").open("ab")
        listen = [] if "--tls-port" in self.args else ["--port", str(self.port)]
        self.process = subprocess.Popen(
            ["redis-server", *listen, "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), *self.args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        wait_port(self.port, up=True)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free port (trust auth, fsync off)."""

    def __init__(self, workdir: Path, *, port: int | None = None) -> None:
        self.workdir = workdir
        self.data = workdir / "pgdata"
        self.port = port or free_port()
        self._as_postgres = os.geteuid() == 0
        workdir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def in_temp_dir(cls) -> PrivatePostgres:
        """A cluster in a fresh directory of its own under the system temp dir
        (pytest's, private to root, is out of the ``postgres`` user's reach)."""
        return cls(Path(tempfile.mkdtemp(prefix="repairbot-pg-")))

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        cmd = [str(PG_BIN / argv[0]), *argv[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def init(self) -> PrivatePostgres:
        if self._as_postgres:
            shutil.chown(self.workdir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        return self

    def start(self) -> PrivatePostgres:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off -k {self.workdir}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.workdir / "pg.log"),
                  "-o", options, "-w", "start")  # fmt: skip
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
