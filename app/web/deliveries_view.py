"""The deliveries page's data: recent webhook deliveries with the repository
each one concerns (read from its recorded body), so people see only those of
repositories they can read, and re-run only those they can act on."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select

from app.app_tables import WebhookDelivery
from app.engine import Store
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
    #: Who caused it (the payload's ``sender.login``).
    sender: str | None = None


def _payload(body: bytes) -> dict[str, object]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _name(payload: dict[str, object], key: str, field: str) -> str | None:
    value = payload.get(key)
    name = value.get(field) if isinstance(value, dict) else None
    return str(name) if name else None


def repo_in(body: bytes) -> str | None:
    return _name(_payload(body), "repository", "full_name")


def recorded_events(store: Store) -> list[str]:
    """The event names recorded (for the page's filter)."""
    with store.engine.connect() as conn:
        query = select(deliveries.c.event).distinct().order_by(deliveries.c.event)
        return [row.event for row in conn.execute(query)]


def recent(
    store: Store,
    principal: Principal,
    *,
    status: str = "",
    event: str = "",
    hide_sender: str = "",
    limit: int = 100,
) -> list[DeliveryRow]:
    """``hide_sender``: leave out deliveries this account caused (repairbot's
    own bot: the echoes of its comments, check runs and pushes)."""
    query = select(deliveries).order_by(deliveries.c.received_at.desc()).limit(limit)
    if status:
        query = query.where(deliveries.c.status == status)
    if event:
        query = query.where(deliveries.c.event == event)
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    out = []
    for r in rows:
        payload = _payload(r.body)
        repo = _name(payload, "repository", "full_name")
        sender = _name(payload, "sender", "login")
        if not principal.may_read(repo):
            continue
        if hide_sender and sender == hide_sender:
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
                sender,
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
