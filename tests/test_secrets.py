"""Secrets are read once, handed over by descriptor, and gone from the process after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from app import secrets
from app.config import Settings
from app.demo.run import WorkerProcess

CHILD = """
import os, sys
from app import secrets
got = secrets.receive(os.environ)
secrets.lock_down(os.environ, ["TEAM_API_KEY"])
left = sorted(n for n in os.environ if n not in ("PATH", "LC_CTYPE"))  # Python adds LC_CTYPE
print(sorted(got.items()), secrets.is_dumpable(), left, flush=True)
sys.stdin.read()  # wait until the parent has looked
"""


def environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def open_files_of(pid: int) -> list[str]:
    return [os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()]


def test_a_child_reads_handed_over_secrets_then_keeps_none() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "DATABASE_URL": "postgresql://u:db-secret-1a2b@db/x",
        "TEAM_API_KEY": "sk-team-secret-3c4d",
    }
    fd, named = secrets.handover({"GITHUB_PRIVATE_KEY": "pem-secret-5e6f"})
    env.update(named)
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(fd,),
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        os.close(fd)
    assert child.stdout is not None and child.stdin is not None
    line = child.stdout.readline().decode()
    try:
        # Received through the descriptor; not dumpable; nothing secret left in os.environ.
        assert line.startswith("[('GITHUB_PRIVATE_KEY', 'pem-secret-5e6f')] False []")
        # Nor in the block /proc shows (unsetenv alone would leave it there).
        block = environ_of(child.pid)
        for secret in (b"db-secret-1a2b", b"sk-team-secret-3c4d", b"pem-secret-5e6f"):
            assert secret not in block
        assert not any("repairbot-secrets" in f for f in open_files_of(child.pid))
    finally:
        child.stdin.close()
        child.wait(timeout=10)


def test_worker_processes_get_secrets_by_descriptor_not_environment(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        github_private_key="-----BEGIN PRIVATE KEY-----pem-secret-worker",
        github_webhook_secret="webhook-secret-worker",
        worker_id="secrets-test",
    )
    from app.migrate import upgrade

    upgrade(settings.database_url)
    assert "pem-secret-worker" not in str(settings.to_env())
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    assert worker.process is not None
    try:
        deadline = time.monotonic() + 30
        while "repository commands run in" not in _read(tmp_path / "worker.log"):
            assert worker.process.poll() is None, _read(tmp_path / "worker.log")
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.1)
        block = environ_of(worker.process.pid)
        assert b"pem-secret-worker" not in block and b"webhook-secret-worker" not in block
        assert b"REPAIRBOT_SECRETS_FD" in block  # how they came instead
        assert not any("repairbot-secrets" in f for f in open_files_of(worker.process.pid))
        assert "bubblewrap" in _read(tmp_path / "worker.log")
    finally:
        worker.stop()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
