"""Settings: built from the environment once, round-trip through to_env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.config import ConfigError, Settings


def test_defaults_use_a_sqlite_file_in_the_data_dir() -> None:
    settings = Settings.from_env({"REPAIRBOT_DATA_DIR": "/tmp/x"})
    assert settings.database_url == "sqlite:////tmp/x/repairbot.db"
    assert settings.redis_url == ""


def test_to_env_round_trips() -> None:
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://db/x",
            "REPAIRBOT_AGENT_COMMAND": '["python", "agent.py", "--flag"]',
            "REPAIRBOT_CANCEL_ON_CLOSE": "false",
            "REPAIRBOT_RELAY_GRACE": "0.25",
            "REPAIRBOT_WEBHOOK_MAX_BYTES": "1000",
            "REPAIRBOT_DELIVERY_RECONCILE_INTERVAL": "0",
            "GITHUB_PRIVATE_KEY": "-----BEGIN KEY-----",
            "REPAIRBOT_EVIDENCE_STORE": "folder",
            "REPAIRBOT_EVIDENCE_MAX_BYTES": "65536",
            "REPAIRBOT_EVIDENCE_RETENTION_DAYS": "1.5",
        }
    )
    assert (settings.evidence_store, settings.evidence_max_bytes) == ("folder", 65536)
    assert settings.evidence_retention == 1.5 * 86400
    assert "-----BEGIN KEY-----" not in str(settings.to_env())  # secrets travel apart
    assert Settings.from_env({**settings.to_env(), **settings.secret_env()}) == settings


def test_the_arq_poll_delay_defaults_to_the_engines_and_can_be_set() -> None:
    from app.engine._arq_dispatch import POLL_DELAY

    assert Settings.from_env({}).arq_poll_delay == POLL_DELAY
    settings = Settings.from_env({"REPAIRBOT_ARQ_POLL_DELAY": "2.5"})
    assert settings.arq_poll_delay == 2.5
    assert Settings.from_env(settings.to_env()).arq_poll_delay == 2.5


def test_evidence_is_in_the_database_unless_told_otherwise() -> None:
    assert Settings.from_env({}).evidence_store == "database"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REPAIRBOT_CONCURRENCY", "many"),
        ("REPAIRBOT_CANCEL_ON_CLOSE", "perhaps"),
        ("REPAIRBOT_AGENT_COMMAND", "python agent.py"),
        ("REPAIRBOT_RECONCILE_INTERVAL", "soon"),
        ("REPAIRBOT_EVIDENCE_STORE", "s3"),
        ("REPAIRBOT_EVIDENCE_MAX_BYTES", "12"),
        ("REPAIRBOT_EVIDENCE_RETENTION_DAYS", "a week"),
        ("REPAIRBOT_WEBHOOK_READ_TIMEOUT", "slow"),
        ("REPAIRBOT_WEBHOOK_BYTES_IN_FLIGHT", "lots"),
        ("REPAIRBOT_DELIVERY_RECONCILE_INTERVAL", "often"),
        ("REPAIRBOT_ARQ_POLL_DELAY", "rarely"),
        ("REPAIRBOT_ARQ_POLL_DELAY", "0"),
    ],
)
def test_malformed_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_the_private_key_never_shows_in_repr() -> None:
    settings = Settings.from_env({"GITHUB_PRIVATE_KEY": "super-secret-pem"})
    assert "super-secret-pem" not in repr(settings)


def test_the_sandbox_hides_the_data_dir_key_file_database_and_home(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "REPAIRBOT_DATA_DIR": str(tmp_path / "data"),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'elsewhere.db'}",
            "GITHUB_PRIVATE_KEY_FILE": str(tmp_path / "key.pem"),
            "REPAIRBOT_SANDBOX_READ_ONLY": f"/opt/tools{os.pathsep}/srv/sdk",
        }
        | {"GITHUB_PRIVATE_KEY": "pem"}
    )
    isolation = settings.isolation()
    assert isolation.mode == "auto"
    assert set(isolation.hidden) == {
        tmp_path / "data",
        tmp_path / "elsewhere.db",
        tmp_path / "key.pem",
        Path.home(),
    }
    assert isolation.read_only == (Path("/opt/tools"), Path("/srv/sdk"))
    with pytest.raises(ConfigError, match="REPAIRBOT_SANDBOX"):
        Settings.from_env({"REPAIRBOT_SANDBOX": "chroot"})
