"""Webhook intake: verify, record, route, all in one transaction.

The web layer hands over the headers and the raw body; this module decides
the answer. It knows nothing of HTTP frameworks, so tests drive it directly
and the CLI reuses it to retry a failed delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from app.config import Settings
from app.engine.jobs import Job
from app.engine.registry import Registry
from app.engine.store import Store, Tx
from app.tables import WebhookDelivery
from app.webhooks.events import PayloadError, UnknownEvent, parse_event
from app.webhooks.signature import verify
from handlers.router import HandlerContext, Router

log = logging.getLogger("repairbot.intake")
deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]

#: GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub.
MAX_BODY_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class IntakeResult:
    status_code: int
    message: str
    jobs: list[Job] = field(default_factory=list)


class Intake:
    def __init__(self, store: Store, registry: Registry, router: Router, settings: Settings):
        self.store = store
        self.registry = registry
        self.router = router
        self.settings = settings

    def receive(self, headers: Mapping[str, str], body: bytes) -> IntakeResult:
        """Answer one delivery. ``headers`` must be case-insensitive (Starlette's are)."""
        if len(body) > MAX_BODY_BYTES:
            return IntakeResult(413, "payload larger than GitHub's 25 MB cap")
        check = verify(
            body, headers.get("x-hub-signature-256"), self.settings.github_webhook_secret
        )
        if not check.ok:
            log.warning("webhook refused: signature %s", check.value)
            return IntakeResult(401, f"signature {check.value}")
        delivery_id = headers.get("x-github-delivery", "").strip()
        event = headers.get("x-github-event", "").strip()
        if not delivery_id or not event:
            return IntakeResult(400, "missing X-GitHub-Delivery or X-GitHub-Event")
        try:
            with self.store.transaction() as tx:
                return self._record_and_route(tx, delivery_id, event, body)
        except IntegrityError:
            # A concurrent copy of this delivery committed first.
            return IntakeResult(200, f"delivery {delivery_id} already received")

    def _record_and_route(self, tx: Tx, delivery_id: str, event: str, body: bytes) -> IntakeResult:
        seen = tx.conn.execute(
            select(deliveries.c.status).where(deliveries.c.delivery_id == delivery_id)
        ).first()
        if seen is not None:
            return IntakeResult(200, f"delivery {delivery_id} already received ({seen.status})")
        try:
            parsed = parse_event(event, body)
        except PayloadError as exc:
            # Signed by GitHub but unusable: keep it (nothing signed is lost) and say why.
            self._insert(tx, delivery_id, event, None, "malformed", str(exc), body)
            return IntakeResult(400, str(exc))
        action = parsed.action
        if isinstance(parsed, UnknownEvent) or not self.router.handlers_for(parsed.key):
            self._insert(tx, delivery_id, event, action, "ignored", "no handler", body)
            return IntakeResult(202, f"{event}.{action} ignored")
        self._insert(tx, delivery_id, event, action, "received", None, body)
        status, detail = self._route(tx, delivery_id, parsed)
        self._finish(tx, delivery_id, status, detail)
        code = 202
        return IntakeResult(code, f"{event}.{action} {status}: {detail}", tx.jobs)

    def _route(self, tx: Tx, delivery_id: str, parsed: object) -> tuple[str, str]:
        ctx = HandlerContext(tx, self.registry, self.settings, delivery_id)
        key = parsed.key  # type: ignore[attr-defined]
        try:
            # A savepoint: a failing handler's writes vanish, the delivery record stays.
            with tx.conn.begin_nested():
                jobs_before = len(tx.jobs)
                try:
                    for handler in self.router.handlers_for(key):
                        handler(parsed, ctx)
                except BaseException:
                    del tx.jobs[jobs_before:]
                    raise
        except Exception as exc:
            log.exception("handler for %s failed on delivery %s", key, delivery_id)
            return "failed", f"{type(exc).__name__}: {exc}"
        return "handled", "; ".join(ctx.notes) or "nothing to do"

    def _insert(
        self,
        tx: Tx,
        delivery_id: str,
        event: str,
        action: str | None,
        status: str,
        detail: str | None,
        body: bytes,
    ) -> None:
        tx.conn.execute(
            insert(deliveries).values(
                delivery_id=delivery_id,
                event=event,
                action=action,
                status=status,
                detail=detail,
                body=body,
                received_at=tx.now,
                handled_at=tx.now if status != "received" else None,
            )
        )

    def _finish(self, tx: Tx, delivery_id: str, status: str, detail: str) -> None:
        tx.conn.execute(
            update(deliveries)
            .where(deliveries.c.delivery_id == delivery_id)
            .values(status=status, detail=detail, handled_at=tx.now)
        )

    def retry(self, delivery_id: str) -> IntakeResult:
        """Run a recorded delivery's handlers again (after a fix, from the CLI)."""
        with self.store.transaction() as tx:
            row = tx.conn.execute(
                select(deliveries).where(deliveries.c.delivery_id == delivery_id)
            ).first()
            if row is None:
                return IntakeResult(404, f"no delivery {delivery_id}")
            if row.status == "handled":
                return IntakeResult(200, f"delivery {delivery_id} was already handled")
            try:
                parsed = parse_event(row.event, row.body)
            except PayloadError as exc:
                return IntakeResult(400, str(exc))
            status, detail = self._route(tx, delivery_id, parsed)
            tx.conn.execute(
                update(deliveries)
                .where(deliveries.c.delivery_id == delivery_id)
                .values(
                    status=status,
                    detail=detail,
                    handled_at=tx.now,
                    attempts=deliveries.c.attempts + 1,
                )
            )
            return IntakeResult(202 if status == "handled" else 500, detail, tx.jobs)
