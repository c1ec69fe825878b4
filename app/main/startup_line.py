"""The one line a process logs when it starts: what it is and what it uses,
so that the first look at its logs answers "which database, which Redis,
which sandbox, which version"."""

from __future__ import annotations

import logging

from app.config import Settings
from app.main.preflight import database_kind, safe_url
from app.sandbox import describe
from app.version import package_version

log = logging.getLogger("repairbot.startup")


def startup_fields(settings: Settings, *, role: str, listening: str | None) -> dict[str, str]:
    """What the line says, as fields (also attached to the JSON line)."""
    runs_commands = role in ("serve", "worker")
    return {
        "role": role,
        "version": package_version(),
        "code_version": settings.code_version,
        "listening": listening or "-",
        "database": f"{database_kind(settings.database_url)} {safe_url(settings.database_url)}",
        "dispatch": f"redis {safe_url(settings.redis_url)}"
        if settings.redis_url
        else "embedded (no REDIS_URL)",
        "sandbox": describe(settings.isolation()) if runs_commands else "-",
    }


def log_startup(settings: Settings, *, role: str, listening: str | None = None) -> None:
    fields = startup_fields(settings, role=role, listening=listening)
    where = f" listening on {fields['listening']};" if listening else ""
    sandbox = (
        f"repository commands run in {fields['sandbox']}"
        if fields["sandbox"] != "-"
        else "no worker in this process"
    )
    log.info(
        "repairbot %s %s (code %s) starting:%s database %s; dispatch %s; %s",
        fields["version"],
        role,
        fields["code_version"],
        where,
        fields["database"],
        fields["dispatch"],
        sandbox,
        extra={"startup": fields},
    )
