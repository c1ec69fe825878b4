"""Operator API tokens: made by ``repairbot tokens create``, kept as hashes.

A token is ``rbt_`` plus 32 random bytes (URL-safe base64). Only its sha256 is
stored, so reading the database does not yield a usable token; lookups hash
the presented token and compare in SQL (a hash of a 256-bit secret leaks
nothing through timing). Scopes: ``read`` (runs, evidence, deliveries),
``act`` (run actions, delivery re-runs), ``metrics`` (``/metrics`` only).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from app.app_tables import ApiToken
from app.engine import Store

api_tokens = ApiToken.__table__  # type: ignore[attr-defined]
PREFIX = "rbt_"
SCOPES = frozenset({"read", "act", "metrics"})


class TokenError(ValueError):
    """A token cannot be made as asked (unknown scope, name taken)."""


@dataclass(frozen=True)
class TokenRecord:
    name: str
    scopes: frozenset[str]
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(store: Store, name: str, scopes: set[str]) -> str:
    """Record a new token and return it: the only time it is ever shown."""
    unknown = scopes - SCOPES
    if unknown or not scopes:
        raise TokenError(f"scopes must be among {sorted(SCOPES)}, got {sorted(scopes)}")
    token = PREFIX + secrets.token_urlsafe(32)
    try:
        with store.transaction() as tx:
            tx.conn.execute(
                insert(api_tokens).values(
                    name=name,
                    token_sha256=_digest(token),
                    scopes=" ".join(sorted(scopes)),
                    created_at=tx.now,
                )
            )
    except IntegrityError:
        raise TokenError(f"a token named {name!r} exists already") from None
    return token


def verify_token(store: Store, token: str) -> TokenRecord | None:
    """The live token's record, or None (unknown, revoked, not ours)."""
    if not token.startswith(PREFIX):
        return None
    digest = _digest(token)
    with store.engine.begin() as conn:
        row = conn.execute(
            select(api_tokens).where(
                api_tokens.c.token_sha256 == digest, api_tokens.c.revoked_at.is_(None)
            )
        ).first()
        if row is None:
            return None
        conn.execute(
            update(api_tokens).where(api_tokens.c.id == row.id).values(last_used_at=time.time())
        )
    return _record(row)


def list_tokens(store: Store) -> list[TokenRecord]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(api_tokens).order_by(api_tokens.c.created_at)).all()
    return [_record(r) for r in rows]


def revoke_token(store: Store, name: str) -> bool:
    with store.transaction() as tx:
        moved = tx.conn.execute(
            update(api_tokens)
            .where(api_tokens.c.name == name, api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=tx.now)
        ).rowcount
    return bool(moved)


def _record(row: object) -> TokenRecord:
    return TokenRecord(
        name=row.name,  # type: ignore[attr-defined]
        scopes=frozenset(row.scopes.split()),  # type: ignore[attr-defined]
        created_at=row.created_at,  # type: ignore[attr-defined]
        last_used_at=row.last_used_at,  # type: ignore[attr-defined]
        revoked_at=row.revoked_at,  # type: ignore[attr-defined]
    )
