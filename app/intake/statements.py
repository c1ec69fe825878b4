"""The intake's statements, built once (the style of app/engine/_store/statements.py).

A statement built per delivery (``insert(t).values(**row)``) coerces every
value and computes a cache key before SQLAlchemy finds the compiled SQL: about
a third of the intake's CPU per delivery. These take their values as
parameters. Parameter names carry a ``p_`` prefix where SQLAlchemy reserves a
column's own name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Insert, Select, Update, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.app_tables import WebhookDelivery

deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]

#: An earlier copy of a delivery, with everything needed to handle it again.
FIND_DELIVERY: Select[Any] = select(deliveries).where(deliveries.c.delivery_id == bindparam("p_id"))

#: Earlier copies of several deliveries at once (a group's, app/web/group_commit.py).
FIND_DELIVERIES: Select[Any] = select(deliveries).where(
    deliveries.c.delivery_id.in_(bindparam("p_ids", expanding=True))
)

#: Record a delivery, its columns as parameters. A copy already there (a
#: concurrent transaction committed it first) makes this a no-op with
#: ``rowcount`` 0 instead of an error, so the caller rolls back only its own
#: savepoint; an error would abort every delivery sharing the transaction.
RECORD_DELIVERY: dict[str, Insert] = {
    "postgresql": pg_insert(deliveries).on_conflict_do_nothing(),
    "sqlite": sqlite_insert(deliveries).on_conflict_do_nothing(),
}

#: The same, naming the deliveries it wrote (an id missing from the answer had
#: a copy recorded already). For a group, executemany: SQLAlchemy sends it as
#: one multi-row INSERT.
RECORD_DELIVERIES: dict[str, Insert] = {
    name: stmt.returning(deliveries.c.delivery_id) for name, stmt in RECORD_DELIVERY.items()
}

#: A recorded delivery handled again (a redelivery of a failed one, or a retry).
HANDLED_AGAIN: Update = (
    update(deliveries)
    .where(deliveries.c.delivery_id == bindparam("p_id"))
    .values(
        status=bindparam("p_status"),
        detail=bindparam("p_detail"),
        handled_at=bindparam("p_now"),
        attempts=deliveries.c.attempts + 1,
    )
)
