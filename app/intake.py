"""Webhook intake: verify, record, route, all in one transaction.

The web layer hands over the headers and the raw body; this module decides
the answer. It knows nothing of HTTP frameworks, so tests drive it directly
and the CLI reuses it to retry a failed delivery.

Nothing that passed the signature check is lost: a signed body that cannot be
parsed (not JSON, too deep, not an object, a form post, missing fields) is
recorded as ``malformed`` and answered 400; a signed delivery without a usable
``X-GitHub-Delivery`` is recorded under a key derived from what it has. The
only signed deliveries not recorded are those that arrive while the database
is down: they get 503, GitHub marks them failed, and the delivery reconciler
(app/delivery_reconciler.py) has GitHub send them again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from app.app_tables import WebhookDelivery
from app.config import Settings
from app.engine.jobs import Job
from app.engine.registry import Registry
from app.engine.store import Store, Tx
from app.webhooks.events import PayloadError, UnknownEvent, parse_event
from app.webhooks.routing import HandlerContext, Router
from app.webhooks.signature import verify

log = logging.getLogger("repairbot.intake")
deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]

#: GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub.
MAX_BODY_BYTES = 25 * 1024 * 1024
#: GitHub's delivery ids are UUIDs; anything printable up to this length is
#: kept as sent (a longer key would not fit a PostgreSQL index row).
_DELIVERY_ID = re.compile(r"[\x21-\x7e]{1,128}")
_EVENT = re.compile(r"[a-z_]{1,64}")
#: Seconds a sender should wait when the database is down.
DATABASE_RETRY_AFTER = 30


def delivery_key(header: str | None, body: bytes) -> str:
    """The key a signed delivery is recorded under.

    Normally its ``X-GitHub-Delivery`` value. A missing or unusable one (empty,
    too long, control characters) is replaced by a digest, so the delivery is
    still kept, once, and a resend of the same thing finds it.
    """
    value = (header or "").strip()
    if _DELIVERY_ID.fullmatch(value):
        return value
    source = value.encode("utf-8", "surrogateescape") if value else body
    return ("unidentified:" if not value else "invalid:") + hashlib.sha256(source).hexdigest()


def _text(value: str | None, limit: int = 2000) -> str | None:
    """A string any database text column takes: no NUL, no lone surrogates, bounded."""
    if value is None:
        return None
    clean = value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    return clean[:limit]


@dataclass(frozen=True)
class IntakeResult:
    status_code: int
    message: str
    jobs: list[Job] = field(default_factory=list)
    #: Seconds, for a 503: when the sender may try again.
    retry_after: int | None = None


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
        raw_id = headers.get("x-github-delivery")
        delivery_id = delivery_key(raw_id, body)
        event = (headers.get("x-github-event") or "").strip()
        problem = None
        if delivery_id != (raw_id or "").strip():
            problem = "missing or unusable X-GitHub-Delivery"
        elif not _EVENT.fullmatch(event):
            problem = "missing or unusable X-GitHub-Event"
        try:
            with self.store.transaction() as tx:
                if problem is not None:
                    return self._keep_malformed(tx, delivery_id, event, body, problem)
                return self._record_and_route(tx, delivery_id, event, body)
        except IntegrityError:
            # A concurrent copy of this delivery committed first.
            return IntakeResult(200, f"delivery {delivery_id} already received")
        except Exception:
            # A database error, or a bug outside the handlers' savepoint: the
            # handling is rolled back, but the signed delivery must not be lost.
            log.exception("could not record delivery %s", delivery_id)
            return self._record_failure(delivery_id, event, body)

    def _record_failure(self, delivery_id: str, event: str, body: bytes) -> IntakeResult:
        """The handling transaction failed: keep the delivery
        alone, marked failed (a redelivery retries it), or say 503 if even that
        cannot be written (the database is down; GitHub marks the delivery
        failed and the delivery reconciler asks for it again)."""
        try:
            with self.store.transaction() as tx:
                seen = tx.conn.execute(
                    select(deliveries.c.status).where(deliveries.c.delivery_id == delivery_id)
                ).first()
                if seen is None:
                    name = event if _EVENT.fullmatch(event) else "invalid"
                    self._insert(
                        tx, delivery_id, name, None, "failed", "database error in handling", body
                    )
        except IntegrityError:
            return IntakeResult(200, f"delivery {delivery_id} already received")
        except DBAPIError:
            log.exception("database unavailable: delivery %s not recorded", delivery_id)
            return IntakeResult(
                503, "database unavailable; try again later", retry_after=DATABASE_RETRY_AFTER
            )
        return IntakeResult(
            202, f"delivery {delivery_id} kept; handling failed and will be retried"
        )

    def _keep_malformed(
        self, tx: Tx, delivery_id: str, event: str, body: bytes, problem: str
    ) -> IntakeResult:
        seen = tx.conn.execute(
            select(deliveries.c.status).where(deliveries.c.delivery_id == delivery_id)
        ).first()
        if seen is not None:
            return IntakeResult(200, f"delivery {delivery_id} already received ({seen.status})")
        name = event if _EVENT.fullmatch(event) else "invalid"
        self._insert(tx, delivery_id, name, None, "malformed", problem, body)
        return IntakeResult(400, problem)

    def _record_and_route(self, tx: Tx, delivery_id: str, event: str, body: bytes) -> IntakeResult:
        seen = tx.conn.execute(
            select(deliveries).where(deliveries.c.delivery_id == delivery_id)
        ).first()
        if seen is not None and seen.status == "failed":
            # A redelivery of one whose handling failed: that is a request to try again.
            status, detail = self._handle_again(tx, seen)
            return IntakeResult(202, f"delivery {delivery_id} handled again: {detail}", tx.jobs)
        if seen is not None:
            return IntakeResult(200, f"delivery {delivery_id} already received ({seen.status})")
        try:
            parsed = parse_event(event, body)
        except PayloadError as exc:
            # Signed by GitHub but unusable: keep it (nothing signed is lost) and say why.
            self._insert(tx, delivery_id, event, None, "malformed", str(exc), body)
            return IntakeResult(400, _text(str(exc), 500) or "malformed")
        except (RecursionError, ValueError, TypeError, MemoryError) as exc:
            # Nesting deeper than the parser's stack, and whatever else a hostile
            # but correctly signed body can make the decoder raise.
            detail = f"body cannot be parsed: {type(exc).__name__}"
            self._insert(tx, delivery_id, event, None, "malformed", detail, body)
            return IntakeResult(400, detail)
        action = parsed.action
        if isinstance(parsed, UnknownEvent) or not self.router.handlers_for(parsed.key):
            self._insert(tx, delivery_id, event, action, "ignored", "no handler", body)
            return IntakeResult(202, f"{event}.{_text(action, 100)} ignored")
        # The handling first, then the record with its outcome: one statement
        # instead of an INSERT and an UPDATE (a round trip per delivery). Both
        # are in this transaction, so nothing is acknowledged unrecorded, and a
        # concurrent copy still loses on the unique key (IntegrityError below),
        # which rolls its handling back with it.
        status, detail = self._route(tx, delivery_id, parsed)
        self._insert(tx, delivery_id, event, action, status, detail, body)
        code = 202
        return IntakeResult(code, f"{event}.{_text(action, 100)} {status}: {detail}", tx.jobs)

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
                action=_text(action, 200),
                status=status,
                detail=_text(detail),
                body=body,
                received_at=tx.now,
                handled_at=tx.now if status != "received" else None,
            )
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
            status, detail = self._handle_again(tx, row)
            if status == "malformed":
                return IntakeResult(400, detail)
            return IntakeResult(202 if status == "handled" else 500, detail, tx.jobs)

    def _handle_again(self, tx: Tx, row: Any) -> tuple[str, str]:
        """Route a recorded delivery again; its record says how it went."""
        try:
            parsed = parse_event(row.event, row.body)
        except (PayloadError, RecursionError, ValueError, TypeError) as exc:
            return "malformed", _text(str(exc), 500) or "malformed"
        status, detail = self._route(tx, row.delivery_id, parsed)
        tx.conn.execute(
            update(deliveries)
            .where(deliveries.c.delivery_id == row.delivery_id)
            .values(
                status=status,
                detail=_text(detail),
                handled_at=tx.now,
                attempts=deliveries.c.attempts + 1,
            )
        )
        return status, detail
