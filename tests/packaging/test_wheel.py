"""The wheel alone is enough: built from a copy of the source, installed into
a fresh virtual environment outside the checkout, it migrates SQLite and
PostgreSQL, serves ``/healthz`` and runs the example workflow.

Offline by construction: the wheel is built without build isolation (the
backend is a dev dependency) and installed with ``--no-deps --no-index``; the
fresh environment sees the project environment's site-packages only for the
third-party dependencies (a ``.pth`` line, which does not run the project's
editable-install hook). Every command runs with the working directory outside
the checkout, and the test checks that ``app`` and ``migrations`` are imported
from the fresh environment.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, text

from tests.conftest import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]
COPY_IGNORE = shutil.ignore_patterns(
    ".venv", ".git", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "build", ".data"
)


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the built wheel installed; its bin directory."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORE)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip"]
    offline = ["-q", "--no-deps", "--no-index"]
    run(
        [*pip, "wheel", *offline, "--no-build-isolation", "-w", str(work / "dist"), str(source)],
        cwd=work,
        env=env,
        timeout=300,
    )
    (wheel,) = (work / "dist").glob("repairbot-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work, env=env)
    python = venv / "bin" / "python"
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=work,
        env=env,
    ).strip()
    # Third-party dependencies only: a plain path line, so the project's
    # editable finder (imported by a .pth *in* that directory) never runs.
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        [*pip, "--python", str(python), "install", *offline, str(wheel)],
        cwd=work,
        env=env,
        timeout=300,
    )
    return venv / "bin"


def clean_env(data_dir: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, "REPAIRBOT_DATA_DIR": str(data_dir), **extra}


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    name = f"repairbot_wheel_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield PG_ADMIN_URL.rsplit("/", 1)[0].replace("+psycopg", "") + f"/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.mark.slow
def test_the_installed_package_is_its_own(installed: Path, tmp_path: Path) -> None:
    where = run(
        [
            str(installed / "python"),
            "-c",
            "import app, migrations; print(app.__file__); print(migrations.__file__)",
        ],
        cwd=tmp_path,
        env=clean_env(tmp_path),
    )
    venv = installed.parent.resolve()
    for line in where.splitlines():
        assert Path(line).resolve().is_relative_to(venv), where
        assert not Path(line).resolve().is_relative_to(ROOT), where


@pytest.mark.slow
def test_migrate_on_sqlite_then_serve_and_run_the_example(installed: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = clean_env(data, GITHUB_WEBHOOK_SECRET="wheel-test-secret")
    out = run([str(installed / "repairbot"), "migrate"], cwd=tmp_path, env=env)
    assert "latest schema" in out
    tables = set(inspect(create_engine(f"sqlite:///{data / 'repairbot.db'}")).get_table_names())
    assert {"workflow_runs", "evidence_blobs", "alembic_version"} <= tables

    port = free_port()
    server = subprocess.Popen(
        [str(installed / "repairbot"), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert healthz(f"http://127.0.0.1:{port}/healthz", server) == {"ok": True}
    finally:
        server.terminate()
        server.wait(timeout=20)

    out = run([str(installed / "repairbot"), "example", "a", "b"], cwd=tmp_path, env=env)
    assert "completed:" in out and "'items': 2" in out


@pytest.mark.slow
@pytest.mark.postgres
def test_migrate_on_postgres(installed: Path, tmp_path: Path, fresh_postgres: str) -> None:
    env = clean_env(tmp_path / "data", DATABASE_URL=fresh_postgres)
    run([str(installed / "repairbot"), "migrate"], cwd=tmp_path, env=env)
    engine = create_engine(fresh_postgres.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("select version_num from alembic_version")).scalar()
        assert "evidence_blobs" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    # Idempotent: a second release's migration is a no-op.
    run([str(installed / "repairbot"), "migrate"], cwd=tmp_path, env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthz(url: str, server: subprocess.Popen[bytes], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            output = server.stdout.read().decode() if server.stdout else ""
            raise AssertionError(f"repairbot serve exited {server.returncode}:\n{output}")
        try:
            response = httpx.get(url, timeout=2)
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        assert response.status_code == 200, response.text
        return response.json()
    raise AssertionError(f"{url} did not answer in {timeout}s")


@pytest.mark.slow
def test_the_demo_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """The demo's command agent ships in the package: no checkout needed."""
    agent = run(
        [
            str(installed / "python"),
            "-c",
            "from app.demo.project import fix_agent_command; print(fix_agent_command()[1])",
        ],
        cwd=tmp_path,
        env=clean_env(tmp_path),
    ).strip()
    assert Path(agent).is_file() and Path(agent).resolve().is_relative_to(installed.parent)
    out = run(
        [str(installed / "repairbot"), "demo", "--dir", str(tmp_path / "demo")],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        timeout=400,
    )
    assert "completed, outcome merged" in out, out
