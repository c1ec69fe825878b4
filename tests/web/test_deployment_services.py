"""The shipped deployments reach PostgreSQL and Redis with a password and
over TLS: every service URL in fly.toml, the Dockerfile, the README and the
docs is checked (loopback URLs of local development and benchmarks aside)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "fly.toml",
    "Dockerfile",
    "README.md",
    *sorted(p.name for p in (ROOT / "docs").glob("*.md")),
]
URL = re.compile(
    r"\b(?:postgres(?:ql)?(?:\+\w+)?|rediss?)://[^\s`'\"<>)]*(?:<[^>\s]*>[^\s`'\"<>)]*)*"
)
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
TLS_MODES = {"require", "verify-ca", "verify-full"}


def _path(name: str) -> Path:
    return ROOT / name if (ROOT / name).exists() else ROOT / "docs" / name


def problems(url: str) -> list[str]:
    """Why ``url`` is not a safe deployment URL (empty: it is)."""
    if url.endswith("..."):
        return ["a placeholder without password or TLS"]
    parts = urlsplit(url)
    if not parts.netloc:
        return []  # the scheme named in prose ("takes rediss:// (TLS...)")
    host = (parts.hostname or "").lower()
    if host in LOOPBACK or host.startswith("127."):
        return []  # local development, tests and benchmarks
    found = []
    if not parts.password:
        found.append("no password")
    if parts.scheme.startswith("redis") and parts.scheme != "rediss":
        found.append("Redis without TLS (use rediss://)")
    if parts.scheme.startswith("postgres"):
        mode = parse_qs(parts.query).get("sslmode", [""])[0]
        if mode not in TLS_MODES:
            found.append("PostgreSQL without sslmode=require/verify-full")
    return found


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_service_urls_use_passwords_and_tls(name: str) -> None:
    text = _path(name).read_text()
    bad = {url: why for url in URL.findall(text) if (why := problems(url))}
    assert bad == {}, f"{name}: {bad}"


def test_the_fly_example_names_both_services() -> None:
    urls = URL.findall((ROOT / "fly.toml").read_text())
    assert any(u.startswith("postgresql://") for u in urls)
    assert any(u.startswith("rediss://") for u in urls)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://...", ["a placeholder without password or TLS"]),
        ("redis://...", ["a placeholder without password or TLS"]),
        ("postgresql://app@db.internal/repairbot", ["no password", "PostgreSQL without"]),
        ("postgresql://app:pw@db.internal/repairbot?sslmode=prefer", ["PostgreSQL without"]),
        ("redis://:pw@cache.internal:6379/0", ["Redis without TLS"]),
        ("rediss://cache.internal:6379/0", ["no password"]),
        ("postgresql://app:<password>@<db-host>:5432/repairbot?sslmode=verify-full", []),
        ("rediss://default:<password>@<redis-host>:6379/0", []),
        ("redis://127.0.0.1:6379/13", []),
        ("rediss://", []),
    ],
)
def test_the_lint_itself(url: str, expected: list[str]) -> None:
    found = problems(url)
    assert len(found) == len(expected)
    assert all(f.startswith(e) for f, e in zip(found, expected, strict=True))
