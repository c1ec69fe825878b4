"""Signed-out sessions, kept server side so that signing out ends a sign-in
everywhere: a cookie copied before the sign-out (another tab, a proxy log, a
stolen laptop's browser profile) is refused by every web process after it.

Only the sha256 of the session id is stored, until the cookie would have
expired on its own; older rows are dropped whenever a new one is written.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from app.app_tables import SignedOutSession
from app.engine import Store

signed_out = SignedOutSession.__table__  # type: ignore[attr-defined]


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def sign_out(store: Store, sid: str, *, expires_at: float) -> None:
    """Record ``sid`` as ended (a second sign-out of it is a no-op)."""
    try:
        with store.transaction() as tx:
            tx.conn.execute(delete(signed_out).where(signed_out.c.expires_at < tx.now))
            tx.conn.execute(
                insert(signed_out).values(sid_sha256=_digest(sid), expires_at=expires_at)
            )
    except IntegrityError:
        pass  # signed out twice (two tabs): already recorded


def is_signed_out(store: Store, sid: str) -> bool:
    with store.engine.connect() as conn:
        found = conn.execute(
            select(signed_out.c.sid_sha256).where(signed_out.c.sid_sha256 == _digest(sid))
        ).first()
    return found is not None
