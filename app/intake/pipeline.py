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
(app/intake/reconciler.py) has GitHub send them again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.exc import DBAPIError

from app.config import Settings
from app.engine import Job, Registry, Store, Tx
from app.intake.statements import (
    FIND_DELIVERIES,
    FIND_DELIVERY,
    HANDLED_AGAIN,
    RECORD_DELIVERIES,
)
from app.webhooks.events import ParsedEvent, PayloadError, UnknownEvent, parse_event
from app.webhooks.routing import HandlerContext, Router
from app.webhooks.signature import verify

log = logging.getLogger("repairbot.intake")

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


@dataclass(frozen=True)
class Checked:
    """A delivery that passed the signature check, parsed once, ready to record.

    ``parsed`` is None for a malformed one: ``problem`` is then what its
    record says and ``answer`` what the sender is told (400)."""

    delivery_id: str
    event: str
    body: bytes
    parsed: ParsedEvent | UnknownEvent | None = None
    problem: str = ""
    answer: str = ""
    #: Its X-GitHub-Delivery or X-GitHub-Event was unusable (never handled again).
    bad_headers: bool = False


#: ``Intake.record``'s default: look the delivery's earlier record up itself.
LOOK: Any = object()


class SavepointsNeeded(Exception):
    """:meth:`Intake.record_group` cannot keep a delivery's promises without a
    savepoint of its own (a handler failed, a copy was committed meanwhile, a
    failed delivery is handled again): roll the transaction back and record
    the group with :meth:`Intake.record`."""


class _AlreadyRecorded(Exception):
    """A copy of the delivery is recorded already: roll its handling back."""


class _HandlerFailed(Exception):
    """A handler raised (the cause): roll its writes back, record the failure."""


class Intake:
    def __init__(self, store: Store, registry: Registry, router: Router, settings: Settings):
        self.store = store
        self.registry = registry
        self.router = router
        self.settings = settings

    def receive(self, headers: Mapping[str, str], body: bytes) -> IntakeResult:
        """Answer one delivery, in a transaction of its own. ``headers`` must be
        case-insensitive (Starlette's are)."""
        checked = self.check(headers, body)
        if isinstance(checked, IntakeResult):
            return checked
        return self.record_alone(checked)

    def check(self, headers: Mapping[str, str], body: bytes) -> IntakeResult | Checked:
        """Everything before the database: the answer for a delivery that will
        not be recorded (too large, not signed), or the delivery, parsed."""
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
        if problem is not None:
            name = event if _EVENT.fullmatch(event) else "invalid"
            return Checked(delivery_id, name, body, None, problem, problem, bad_headers=True)
        try:
            parsed = parse_event(event, body)
        except PayloadError as exc:
            # Signed by GitHub but unusable: kept (nothing signed is lost), and say why.
            answer = _text(str(exc), 500) or "malformed"
            return Checked(delivery_id, event, body, None, str(exc), answer)
        except (RecursionError, ValueError, TypeError, MemoryError) as exc:
            # Nesting deeper than the parser's stack, and whatever else a hostile
            # but correctly signed body can make the decoder raise.
            detail = f"body cannot be parsed: {type(exc).__name__}"
            return Checked(delivery_id, event, body, None, detail, detail)
        return Checked(delivery_id, event, body, parsed)

    def record_alone(self, delivery: Checked) -> IntakeResult:
        """Record and handle ``delivery`` in a transaction of its own."""
        try:
            with self.store.transaction() as tx:
                return replace(self.record(tx, delivery), jobs=tx.jobs)
        except Exception:
            # A database error, or a bug outside the handlers' savepoint: the
            # handling is rolled back, but the signed delivery must not be lost.
            # (A concurrent copy is no error: see RECORD_DELIVERY. So not even an
            # IntegrityError here may be answered "already received".)
            log.exception("could not record delivery %s", delivery.delivery_id)
            return self._record_failure(delivery)

    def recorded(self, tx: Tx, delivery_ids: Sequence[str]) -> dict[str, Any]:
        """The records already there for any of ``delivery_ids``, by id: one
        query for a group instead of one per delivery."""
        rows = tx.conn.execute(FIND_DELIVERIES, {"p_ids": list(delivery_ids)})
        return {row.delivery_id: row for row in rows}

    def record(self, tx: Tx, delivery: Checked, seen: Any = LOOK) -> IntakeResult:
        """Record ``delivery`` and run its handlers in ``tx``. Whatever it
        writes is its own: a copy already recorded, or a failing handler,
        leaves ``tx`` as it found it but for the failure's record. The jobs it
        wrote are appended to ``tx.jobs``. An exception means ``tx`` must not
        be committed. ``seen``: its earlier record (None: there is none) if
        the caller looked it up in ``tx`` already (:meth:`recorded`)."""
        delivery_id = delivery.delivery_id
        if seen is LOOK:
            seen = tx.conn.execute(FIND_DELIVERY, {"p_id": delivery_id}).first()
        if seen is not None and seen.status == "failed" and not delivery.bad_headers:
            # A redelivery of one whose handling failed: that is a request to try again.
            _status, detail = self._handle_again(tx, seen)
            return IntakeResult(202, f"delivery {delivery_id} handled again: {detail}")
        if seen is not None:
            return IntakeResult(200, f"delivery {delivery_id} already received ({seen.status})")
        parsed = delivery.parsed
        if parsed is None:
            if not self._insert(tx, delivery, None, "malformed", delivery.problem):
                return _already(delivery_id)
            return IntakeResult(400, delivery.answer)
        event, action = delivery.event, parsed.action
        if isinstance(parsed, UnknownEvent) or not self.router.handlers_for(parsed.key):
            if not self._insert(tx, delivery, action, "ignored", "no handler"):
                return _already(delivery_id)
            return IntakeResult(202, f"{event}.{_text(action, 100)} ignored")

        # The handling first, then the record with its outcome: one statement
        # instead of an INSERT and an UPDATE (a round trip per delivery). Both in
        # the handlers' savepoint, so a copy that another transaction committed
        # first takes this handling back with it.
        def record(status: str, detail: str) -> bool:
            return self._insert(tx, delivery, action, status, detail)

        outcome = self._route(tx, delivery_id, parsed, record)
        if outcome is None:
            return _already(delivery_id)
        status, detail = outcome
        return IntakeResult(202, f"{event}.{_text(action, 100)} {status}: {detail}")

    def record_group(self, tx: Tx, group: Sequence[tuple[Checked, Any]]) -> list[IntakeResult]:
        """Record and handle a group of deliveries in ``tx``, each with its
        earlier record (None: there is none, from :meth:`recorded`): the fast
        path of group commit. Every handler runs without a savepoint and all
        the records go in one INSERT at the end, instead of a SAVEPOINT, a
        RELEASE and an INSERT per delivery. That is only sound while nothing
        needs taking back, so anything that would need it raises
        :class:`SavepointsNeeded` and the caller rolls ``tx`` back whole."""
        results: list[IntakeResult] = []
        rows: list[dict[str, Any]] = []
        in_group: set[str] = set()
        for delivery, seen in group:
            delivery_id = delivery.delivery_id
            if delivery_id in in_group:
                # A second copy in the group: the first is recorded with it.
                results.append(_already(delivery_id))
                continue
            in_group.add(delivery_id)
            if seen is not None:
                if seen.status == "failed" and not delivery.bad_headers:
                    raise SavepointsNeeded(f"delivery {delivery_id} is handled again")
                results.append(
                    IntakeResult(200, f"delivery {delivery_id} already received ({seen.status})")
                )
                continue
            jobs_before = len(tx.jobs)
            parsed = delivery.parsed
            if parsed is None:
                rows.append(self._row(tx, delivery, None, "malformed", delivery.problem))
                results.append(IntakeResult(400, delivery.answer))
                continue
            event, action = delivery.event, parsed.action
            unknown = isinstance(parsed, UnknownEvent)
            handlers = [] if unknown else self.router.handlers_for(parsed.key)
            if not handlers:
                rows.append(self._row(tx, delivery, action, "ignored", "no handler"))
                results.append(IntakeResult(202, f"{event}.{_text(action, 100)} ignored"))
                continue
            ctx = HandlerContext(tx, self.registry, self.settings, delivery_id)
            try:
                for handler in handlers:
                    handler(parsed, ctx)
            except Exception as exc:
                raise SavepointsNeeded(f"a handler failed on delivery {delivery_id}") from exc
            detail = "; ".join(ctx.notes) or "nothing to do"
            rows.append(self._row(tx, delivery, action, "handled", detail))
            results.append(
                IntakeResult(
                    202, f"{event}.{_text(action, 100)} handled: {detail}", tx.jobs[jobs_before:]
                )
            )
        if rows:
            statement = RECORD_DELIVERIES[tx.conn.dialect.name]
            written = set(tx.conn.execute(statement, rows).scalars())
            if len(written) != len(rows):
                # A copy is recorded already (before this group, or by a
                # concurrent transaction meanwhile): the handling done here
                # for it must not stay.
                raise SavepointsNeeded("a copy of a delivery is recorded already")
        return results

    def _record_failure(self, delivery: Checked) -> IntakeResult:
        """The handling transaction failed: keep the delivery
        alone, marked failed (a redelivery retries it), or say 503 if even that
        cannot be written (the database is down; GitHub marks the delivery
        failed and the delivery reconciler asks for it again)."""
        try:
            with self.store.transaction() as tx:
                # A copy already there (committed meanwhile) is kept as it is.
                self._insert(tx, delivery, None, "failed", "database error in handling")
        except DBAPIError:
            log.exception("database unavailable: delivery %s not recorded", delivery.delivery_id)
            return IntakeResult(
                503, "database unavailable; try again later", retry_after=DATABASE_RETRY_AFTER
            )
        return IntakeResult(
            202, f"delivery {delivery.delivery_id} kept; handling failed and will be retried"
        )

    def _route(
        self,
        tx: Tx,
        delivery_id: str,
        parsed: ParsedEvent | UnknownEvent,
        record: Callable[[str, str], bool],
    ) -> tuple[str, str] | None:
        """Run the handlers in a savepoint and ``record`` their outcome in it.
        ``record`` answers False when a copy of the delivery is recorded
        already: then the handling is rolled back and the answer is None."""
        ctx = HandlerContext(tx, self.registry, self.settings, delivery_id)
        key = parsed.key
        jobs_before = len(tx.jobs)
        try:
            # A savepoint: a failing handler's writes vanish, the delivery record stays.
            with tx.conn.begin_nested():
                try:
                    for handler in self.router.handlers_for(key):
                        handler(parsed, ctx)
                except Exception as exc:
                    raise _HandlerFailed from exc
                detail = "; ".join(ctx.notes) or "nothing to do"
                if not record("handled", detail):
                    raise _AlreadyRecorded
        except _AlreadyRecorded:
            del tx.jobs[jobs_before:]
            return None
        except _HandlerFailed as failed:
            del tx.jobs[jobs_before:]
            error = failed.__cause__
            log.error("handler for %s failed on delivery %s", key, delivery_id, exc_info=error)
            detail = f"{type(error).__name__}: {error}"
            return ("failed", detail) if record("failed", detail) else None
        except BaseException:
            del tx.jobs[jobs_before:]
            raise
        return "handled", detail

    def _insert(
        self, tx: Tx, delivery: Checked, action: str | None, status: str, detail: str | None
    ) -> bool:
        """Record ``delivery``; False if a copy is recorded already."""
        values = self._row(tx, delivery, action, status, detail)
        # RETURNING, not ``rowcount``: SQLAlchemy 2.1 reports -1 for a Core
        # INSERT on psycopg, which read as "written" even when a copy was there.
        statement = RECORD_DELIVERIES[tx.conn.dialect.name]
        return tx.conn.execute(statement, values).first() is not None

    @staticmethod
    def _row(
        tx: Tx, delivery: Checked, action: str | None, status: str, detail: str | None
    ) -> dict[str, Any]:
        """``delivery``'s record, as RECORD_DELIVERY takes it."""
        return {
            "delivery_id": delivery.delivery_id,
            "event": delivery.event,
            "action": _text(action, 200),
            "status": status,
            "detail": _text(detail),
            "body": delivery.body,
            "received_at": tx.now,
            "handled_at": tx.now,
            "attempts": 1,
        }

    def retry(self, delivery_id: str) -> IntakeResult:
        """Run a recorded delivery's handlers again (after a fix, from the CLI)."""
        with self.store.transaction() as tx:
            row = tx.conn.execute(FIND_DELIVERY, {"p_id": delivery_id}).first()
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

        def record(status: str, detail: str) -> bool:
            values = {"p_id": row.delivery_id, "p_now": tx.now}
            tx.conn.execute(HANDLED_AGAIN, values | {"p_status": status, "p_detail": _text(detail)})
            return True

        outcome = self._route(tx, row.delivery_id, parsed, record)
        assert outcome is not None  # an update finds no copy to lose to
        return outcome


def _already(delivery_id: str) -> IntakeResult:
    return IntakeResult(200, f"delivery {delivery_id} already received")
