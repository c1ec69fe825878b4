"""Checks a command makes before it starts, so that a wrong setting ends in
one clear line naming it instead of a traceback minutes later.

Each check raises :class:`Unready` with the line to print.
"""

from __future__ import annotations

import errno
import socket

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from app.config import Settings
from app.engine import make_engine
from app.github.auth import AppCredentials, CredentialsError
from app.operations.migrate import alembic_config


class Unready(Exception):
    """A command cannot start; the message is the one line the user sees."""


def safe_url(url: str) -> str:
    """``url`` with its password hidden, for messages (never the raw text:
    a URL that does not parse may still hold a password)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable>"


def database_kind(url: str) -> str:
    """``sqlite`` or ``postgresql`` (the backend name, without the driver)."""
    return make_url(url).get_backend_name()


def schema_revisions(settings: Settings) -> tuple[str | None, str, frozenset[str]]:
    """The database's schema revision, this code's head and every revision
    this code knows. Raises :class:`Unready` when the URL is malformed or the
    database cannot be reached."""
    url = settings.database_url
    try:
        make_url(url)
    except ArgumentError:
        raise Unready(
            "DATABASE_URL is not a database URL "
            "(expected sqlite:///<path> or postgresql://<user>@<host>/<database>)"
        ) from None
    scripts = ScriptDirectory.from_config(alembic_config(url))
    known = frozenset(rev.revision for rev in scripts.walk_revisions())
    try:
        engine = make_engine(url, pool_size=1)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise Unready(f"DATABASE_URL {safe_url(url)} cannot be used: {exc}") from None
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        reason = (str(exc.orig or exc).strip().splitlines() or ["no answer"])[0]
        raise Unready(f"cannot reach the database at {safe_url(url)}: {reason}") from None
    finally:
        engine.dispose()
    head = scripts.get_current_head()
    assert head is not None, "the migrations have one head"
    return current, head, known


def check_schema(settings: Settings) -> None:
    """The database is reachable and at the schema this code expects."""
    current, head, known = schema_revisions(settings)
    if current == head:
        return
    where = safe_url(settings.database_url)
    if current is not None and current not in known:
        raise Unready(
            f"the database at {where} is at revision {current}, which this version "
            f"({head}) does not know: a newer repairbot migrated it"
        )
    state = "has no schema" if current is None else f"is at revision {current}"
    raise Unready(
        f"the database at {where} {state}; this version needs {head}: run `repairbot migrate`"
    )


def check_reachable(settings: Settings) -> None:
    """The database can be reached (for commands that migrate it themselves)."""
    schema_revisions(settings)


def check_webhook_secret(settings: Settings) -> None:
    """Without a secret no delivery can be verified: refuse to serve at all."""
    if not settings.github_webhook_secret:
        raise Unready(
            "GITHUB_WEBHOOK_SECRET is not set: webhooks could not be verified "
            "(set it, or run `repairbot register` to make an App that has one)"
        )


def check_app_credentials(settings: Settings) -> None:
    """When an App id is set its private key must be usable now, not at the
    first GitHub call."""
    if not settings.github_app_id:
        return
    try:
        AppCredentials(settings.github_app_id, settings.github_private_key)
    except CredentialsError as exc:
        raise Unready(str(exc)) from None


def check_listen(host: str, port: int) -> None:
    """The address can be bound (the server binds it again right after)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unready(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            why = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise Unready(f"cannot listen on {host}:{port}: {why}") from None
