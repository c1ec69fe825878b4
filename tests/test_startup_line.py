"""The start-up line: address, database kind, dispatch, sandbox, version (issue 22, point 3)."""

from __future__ import annotations

import logging

import pytest

from app.config import Settings
from app.main.startup_line import log_startup
from app.version import package_version


def test_serve_says_what_it_uses(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(database_url="postgresql://u:secret-pw@db/x", sandbox="none")
    with caplog.at_level(logging.INFO, "repairbot.startup"):
        log_startup(settings, role="serve", listening="http://127.0.0.1:8000")
    [record] = caplog.records
    line = record.getMessage()
    assert line.startswith(f"repairbot {package_version()} serve (code dev) starting:")
    assert "listening on http://127.0.0.1:8000" in line
    assert "database postgresql postgresql://u:***@db/x" in line
    assert "dispatch embedded (no REDIS_URL)" in line
    assert "repository commands run in none" in line
    assert "secret-pw" not in line


def test_web_with_redis_names_it_and_no_sandbox(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(redis_url="redis://:pw@cache:6379/0")
    with caplog.at_level(logging.INFO, "repairbot.startup"):
        log_startup(settings, role="web", listening="http://0.0.0.0:8080")
    line = caplog.records[0].getMessage()
    assert "dispatch redis redis://:***@cache:6379/0" in line
    assert "database sqlite" in line
    assert "no worker in this process" in line
