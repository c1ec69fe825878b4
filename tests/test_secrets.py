"""Secrets are read once, handed over by descriptor, and gone from the process after."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from app import secrets
from app.config import Settings
from app.demo.run import WorkerProcess
from app.engine._db import make_engine
from app.main.worker_process import shared_clients

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
    from app.operations.migrate import upgrade

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


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----\n"
)


def test_known_secrets_are_redacted_whole_and_in_pieces() -> None:
    known = secrets.KnownSecrets.from_env(
        {
            "GITHUB_WEBHOOK_SECRET": "hook-secret-value",
            "GITHUB_PRIVATE_KEY": PEM,
            "DATABASE_URL": "postgresql://bot:db-password-1@db.internal/repairbot",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
        },
        extra=["sk-operator-cli-key-0123456789", "short"],
    )
    text = (
        "env: CLI_AGENT_API_KEY=sk-operator-cli-key-0123456789 HOOK=hook-secret-value\n"
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
        "password db-password-1; a short one: short; redis://127.0.0.1:6379/0\n"
    )
    cleaned = known.redact(text)
    for secret in ("sk-operator", "hook-secret", "VTLw7onL", "db-password-1"):
        assert secret not in cleaned
    # Short values and the parts of a URL that are no secret stay readable.
    assert "short" in cleaned and "redis://127.0.0.1:6379/0" in cleaned
    assert known.found_in(text) and not known.found_in("redis://127.0.0.1:6379/0")
    assert "sk-operator" not in repr(known)


def test_token_shapes_are_redacted_without_being_known() -> None:
    known = secrets.KnownSecrets()
    for token in (
        "ghs_" + "a" * 36,
        "rbp-" + "b" * 43,  # a model proxy token of any attempt
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    ):
        assert token not in known.redact(f"x {token} y")
    # A proposal is refused only for what this worker holds (and proxy tokens):
    # a fixture or an `sk-learn-...` name is no reason to refuse a fix.
    assert known.found_in("rbp-" + "b" * 43)
    assert not known.found_in("sk-learn-compatible-models and ghs_" + "a" * 36)


def test_bytes_are_redacted_and_other_bytes_kept() -> None:
    known = secrets.KnownSecrets(["sk-operator-cli-key-0123456789"])
    data = b"\xff\xfe binary sk-operator-cli-key-0123456789 \x00 end"
    assert known.redact_bytes(data) == b"\xff\xfe binary [redacted] \x00 end"


def test_log_records_are_redacted() -> None:
    known = secrets.KnownSecrets(["sk-operator-cli-key-0123456789"])
    record = logging.makeLogRecord(
        {"msg": "agent said %s", "args": ("key=sk-operator-cli-key-0123456789",)}
    )
    assert secrets.RedactingFilter(known).filter(record)
    assert record.getMessage() == "agent said key=[redacted]"


def test_short_lived_tokens_are_redacted_and_the_oldest_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "SHORT_LIVED_KEPT", 2)
    known = secrets.KnownSecrets()
    for n in range(3):
        known.add_short_lived(f"installation-token-{n}")
    assert known.redact("installation-token-2") == "[redacted]"
    assert known.values() == ["installation-token-1", "installation-token-2"]


def test_a_new_token_compiles_a_small_pattern_not_every_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mint used to recompile the alternation of every value (the private
    key's lines among them) for the next log line: about 12 ms a token."""
    known = secrets.KnownSecrets.from_env({"GITHUB_PRIVATE_KEY": PEM})
    known.redact("warm")
    compiled: list[int] = []
    real = secrets._alternation

    def counting(values: Iterable[str], shapes: Iterable[str] = ()) -> re.Pattern[str]:
        values = list(values)
        compiled.append(len(values))
        return real(values, shapes)

    monkeypatch.setattr(secrets, "_alternation", counting)
    for n in range(40):
        known.add_short_lived(f"ghs_installation-token-{n:04d}")
        assert known.redact(f"token ghs_installation-token-{n:04d}.") == "token [redacted]."
    assert compiled and max(compiled) <= secrets.SHORT_LIVED_CHUNK
    assert known.found_in("x ghs_installation-token-0003 y")
    assert known.redact(PEM.splitlines()[1]) == "[redacted]"


def test_tokens_in_every_chunk_are_redacted_and_the_oldest_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "SHORT_LIVED_KEPT", 5)
    monkeypatch.setattr(secrets, "SHORT_LIVED_CHUNK", 2)
    known = secrets.KnownSecrets(["sk-operator-cli-key-0123456789"])
    tokens = [f"installation-token-{n}" for n in range(7)]
    for token in tokens:
        known.add_short_lived(token)
    text = " ".join(tokens)
    assert known.redact(text) == " ".join(tokens[:2] + ["[redacted]"] * 5)
    assert not known.found_in(tokens[1]) and all(known.found_in(t) for t in tokens[2:])
    assert known.values() == sorted(["sk-operator-cli-key-0123456789", *tokens[2:]])


def test_a_token_overlapping_a_held_value_still_goes_whole() -> None:
    known = secrets.KnownSecrets(["hook-secret-value"])
    # A token that contains a held value, and a value added later that is
    # part of a token: each token is redacted whole, not around the value.
    known.add_short_lived("tok-hook-secret-value-xyz")
    known.add_short_lived("tok-zzzzzzzzzz-qqq")
    known.add("zzzzzzzzzz")
    assert known.redact("a tok-hook-secret-value-xyz b") == "a [redacted] b"
    assert known.redact("a tok-zzzzzzzzzz-qqq b") == "a [redacted] b"
    assert known.redact("a hook-secret-value zzzzzzzzzz b") == "a [redacted] [redacted] b"


def test_forgetting_a_token_keeps_a_long_lived_value_of_the_same_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "SHORT_LIVED_KEPT", 1)
    known = secrets.KnownSecrets(["sk-operator-cli-key-0123456789"])
    known.add_short_lived("sk-operator-cli-key-0123456789")
    known.add_short_lived("tok-abc-overlapping")
    known.add_short_lived("tok-abc-overlapping-more")  # contains the one before
    known.add_short_lived("installation-token-9")
    assert known.redact("sk-operator-cli-key-0123456789") == "[redacted]"
    assert known.values() == ["installation-token-9", "sk-operator-cli-key-0123456789"]


def test_a_worker_redacts_its_secrets_from_its_logs_and_offers_them_to_activities(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "worker.db"
    shutil.copy(sqlite_template, path)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{path}",
        github_webhook_secret="hook-secret-for-the-log-test",
    )
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    logging.getLogger().addHandler(handler)
    engine = make_engine(settings.database_url)
    try:
        deps = shared_clients(settings, engine)
        logging.getLogger("repairbot.test").warning(
            "agent printed %s", settings.github_webhook_secret
        )
    finally:
        logging.getLogger().removeHandler(handler)
        engine.dispose()
    assert lines == ["agent printed [redacted]"]
    assert deps.agent.known_secrets().found_in("x hook-secret-for-the-log-test y")
