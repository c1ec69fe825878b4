"""Reading the webhook delivery log (for the CLI and the dashboard)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.app_tables import WebhookDelivery
from app.engine import Store

deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]


def list_deliveries(store: Store, *, status: str | None = None, limit: int = 50) -> list[Any]:
    query = (
        select(
            deliveries.c.delivery_id,
            deliveries.c.event,
            deliveries.c.action,
            deliveries.c.status,
            deliveries.c.detail,
            deliveries.c.received_at,
        )
        .order_by(deliveries.c.received_at.desc())
        .limit(limit)
    )
    if status:
        query = query.where(deliveries.c.status == status)
    with store.engine.connect() as conn:
        return list(conn.execute(query).all())
