"""The deliveries page's data: recent webhook deliveries with the repository
each one concerns (read from its recorded body), so people see only those of
repositories they can read, and re-run only those they can act on."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select

from app.app_tables import WebhookDelivery
from app.engine.store import Store
from app.web.access import Principal

deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]
#: A handled delivery has nothing to re-run; these do.
RERUNNABLE = frozenset({"failed", "received"})


@dataclass(frozen=True)
class DeliveryRow:
    delivery_id: str
    event: str
    action: str | None
    status: str
    detail: str | None
    received_at: float
    repo: str | None
    may_rerun: bool


def repo_in(body: bytes) -> str | None:
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    repo = payload.get("repository") if isinstance(payload, dict) else None
    name = repo.get("full_name") if isinstance(repo, dict) else None
    return str(name) if name else None


def recent(
    store: Store, principal: Principal, *, status: str = "", limit: int = 100
) -> list[DeliveryRow]:
    query = select(deliveries).order_by(deliveries.c.received_at.desc()).limit(limit)
    if status:
        query = query.where(deliveries.c.status == status)
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    out = []
    for r in rows:
        repo = repo_in(r.body)
        if not principal.may_read(repo):
            continue
        out.append(
            DeliveryRow(
                r.delivery_id,
                r.event,
                r.action,
                r.status,
                r.detail,
                r.received_at,
                repo,
                r.status in RERUNNABLE and principal.may_act(repo),
            )
        )
    return out


def repo_of_delivery(store: Store, delivery_id: str) -> tuple[bool, str | None]:
    """(exists, repository) of one recorded delivery."""
    with store.engine.connect() as conn:
        row = conn.execute(
            select(deliveries.c.body).where(deliveries.c.delivery_id == delivery_id)
        ).first()
    return (False, None) if row is None else (True, repo_in(row.body))
