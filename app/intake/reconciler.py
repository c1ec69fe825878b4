"""The delivery reconciler: no webhook is lost while the web process is down.

GitHub does not retry a failed delivery. It keeps the App's recent deliveries
(``GET /app/hook/deliveries``, newest first, paged by cursor) and redelivers
one on request (``POST /app/hook/deliveries/{id}/attempts``). A pass:

1. Scan (one worker at a time, under a lease in ``delivery_scans``): page
   through the list back to the previous scan's high-water mark (less an
   overlap, since GitHub lists an attempt when it finishes, not in id order).
   Every guid the intake never recorded, or recorded as ``failed``, becomes a
   ``pending`` row in ``webhook_redeliveries``. A scan cut short (page budget,
   error) keeps GitHub's cursor and resumes there next pass; the mark moves
   only when a scan reaches it, so nothing between is skipped.
2. Ask (any worker): for each pending guid whose last request is older than
   its backoff (the interval, doubling per ask up to 64 intervals), claim the
   request with a conditional update on its ask count (so several workers
   send at most one request per guid per interval), then ask GitHub to
   redeliver its newest attempt. The intake records the redelivery under
   the same guid, once; the next pass sees the record and closes the row.

GitHub's answers are classified by app/github/errors.py: a rate limit stores
``not_before`` for every worker; a guid GitHub no longer redelivers (too old,
gone) or one asked ``MAX_REQUESTS`` times is given up, loudly.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from githubkit.exception import GitHubException
from githubkit.utils import UNSET
from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.app_tables import DeliveryScan, Redelivery, WebhookDelivery
from app.engine import TransientError
from app.github.client import GitHubClientFactory
from app.github.errors import classify, status_of

log = logging.getLogger("repairbot.deliveries")
scans = DeliveryScan.__table__  # type: ignore[attr-defined]
redeliveries = Redelivery.__table__  # type: ignore[attr-defined]
deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]

SCAN = "github-app"
#: Deliveries listed this long before the mark are read again (finish order is not id order).
OVERLAP = 300.0
#: A first scan (no mark yet) looks back this far, not over GitHub's whole 3 days:
#: older deliveries predate this installation of repairbot.
FIRST_LOOKBACK = 3600.0
#: GitHub redelivers deliveries up to 3 days old.
REDELIVERABLE_FOR = 3 * 24 * 3600.0
PAGE_SIZE = 100
PAGES_PER_PASS = 10
REQUESTS_PER_PASS = 50
#: Asks for one guid before giving up (with the backoff below, about a day at
#: the default interval; GitHub's own limit, 3 days, ends it sooner if shorter).
MAX_REQUESTS = 30
#: The wait between asks doubles from the interval up to this many intervals,
#: so an outage of hours is covered without asking every minute.
MAX_BACKOFF_INTERVALS = 64
Clock = Callable[[], float]


@dataclass
class PassReport:
    scanned: int = 0
    pages: int = 0
    scan_complete: bool = False
    found: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    skipped: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        return (
            f"scanned {self.scanned} deliveries in {self.pages} pages"
            f" ({'complete' if self.scan_complete else 'to be continued'}); "
            f"{len(self.found)} missing found, {len(self.requested)} redeliveries asked, "
            f"{len(self.recorded)} now recorded, {len(self.gave_up)} given up"
        )


class DeliveryReconciler:
    """Keyword arguments: ``interval`` is the least time between two requests
    for one guid (and the pass period); ``holder`` names this worker in the
    scan lease; ``page_size`` and ``pages_per_pass`` bound one pass's reading;
    ``clock`` is for tests."""

    def __init__(
        self,
        engine: Engine,
        github: GitHubClientFactory,
        *,
        interval: float,
        holder: str,
        page_size: int = PAGE_SIZE,
        pages_per_pass: int = PAGES_PER_PASS,
        clock: Clock = time.time,
    ) -> None:
        self.page_size = page_size
        self.pages_per_pass = pages_per_pass
        self.engine = engine
        self.github = github
        self.interval = interval
        self.holder = holder
        self.clock = clock

    async def run_forever(self) -> None:
        while True:
            try:
                report = await self.run_once()
                if report.found or report.requested or report.gave_up:
                    log.info("delivery reconciler: %s", report.summary())
            except Exception:
                # A database or network blip: the next pass starts over from the
                # stored position, which only moves forward after success.
                log.exception("delivery reconciler pass failed")
            await asyncio.sleep(self.interval)

    async def run_once(self) -> PassReport:
        report = PassReport()
        now = self.clock()
        row = await asyncio.to_thread(self._scan_row, now)
        if row.not_before > now:
            report.skipped = f"GitHub asked us to wait until {row.not_before:.0f}"
            return report
        if await asyncio.to_thread(self._take_lease, now):
            try:
                await self._scan(row, report)
            finally:
                await asyncio.to_thread(self._drop_lease)
        await self._ask(report)
        return report

    # -- the scan ------------------------------------------------------------------

    def _scan_row(self, now: float) -> Any:
        with self.engine.begin() as conn:
            row = conn.execute(select(scans).where(scans.c.name == SCAN)).first()
            if row is not None:
                return row
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(scans).values(name=SCAN, updated_at=now))
        except IntegrityError:
            pass  # another worker created it first
        with self.engine.begin() as conn:
            return conn.execute(select(scans).where(scans.c.name == SCAN)).one()

    def _take_lease(self, now: float) -> bool:
        lease = max(60.0, self.interval * 2)
        with self.engine.begin() as conn:
            taken = conn.execute(
                update(scans)
                .where(scans.c.name == SCAN)
                .where((scans.c.lease_until < now) | (scans.c.lease_holder == self.holder))
                .values(lease_holder=self.holder, lease_until=now + lease, updated_at=now)
            ).rowcount
        return bool(taken)

    def _drop_lease(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(scans)
                .where(scans.c.name == SCAN, scans.c.lease_holder == self.holder)
                .values(lease_holder=None, lease_until=0.0)
            )

    async def _scan(self, row: Any, report: PassReport) -> None:
        now = self.clock()
        stop_at = row.high_water - OVERLAP if row.high_water is not None else now - FIRST_LOOKBACK
        cursor: str | None = row.resume_cursor
        newest: float | None = row.scan_newest if cursor else None
        app = self.github.app()
        while report.pages < self.pages_per_pass:
            try:
                response = await app.rest.apps.async_list_webhook_deliveries(
                    per_page=self.page_size, cursor=cursor if cursor else UNSET
                )
            except GitHubException as exc:
                if cursor is not None and status_of(exc) in (400, 422):
                    log.warning("GitHub refused the stored cursor; scanning from the top")
                    await asyncio.to_thread(self._save_position, None, None, None)
                    return
                await self._on_error(exc, "listing deliveries")
                return
            report.pages += 1
            items = response.parsed_data
            reached = False
            found: list[Any] = []
            for item in items:
                at = _epoch(item.delivered_at)
                newest = at if newest is None else max(newest, at)
                if at < stop_at:
                    reached = True
                    break
                report.scanned += 1
                found.append(item)
            report.found += await asyncio.to_thread(self._note_missing, found)
            cursor = _next_cursor(response.headers.get("link", ""))
            if reached or cursor is None:
                report.scan_complete = True
                await asyncio.to_thread(self._save_position, newest, None, None)
                return
        await asyncio.to_thread(self._save_position, None, cursor, newest)

    def _save_position(
        self, high_water: float | None, cursor: str | None, scan_newest: float | None
    ) -> None:
        values: dict[str, Any] = {
            "resume_cursor": cursor,
            "scan_newest": scan_newest,
            "updated_at": self.clock(),
        }
        with self.engine.begin() as conn:
            if high_water is not None:
                current = conn.execute(
                    select(scans.c.high_water).where(scans.c.name == SCAN)
                ).scalar_one()
                values["high_water"] = max(high_water, current or high_water)
            conn.execute(update(scans).where(scans.c.name == SCAN).values(**values))

    def _note_missing(self, items: list[Any]) -> list[str]:
        """Pending rows for the guids among ``items`` the intake does not have."""
        newest_by_guid: dict[str, Any] = {}
        for item in items:  # newest first: keep each guid's newest attempt
            newest_by_guid.setdefault(item.guid, item)
        if not newest_by_guid:
            return []
        now = self.clock()
        found = []
        with self.engine.begin() as conn:
            have: dict[str, str] = dict(
                conn.execute(
                    select(deliveries.c.delivery_id, deliveries.c.status).where(
                        deliveries.c.delivery_id.in_(newest_by_guid)
                    )
                ).all()
            )
            known: dict[str, int] = dict(
                conn.execute(
                    select(redeliveries.c.guid, redeliveries.c.github_id).where(
                        redeliveries.c.guid.in_(newest_by_guid)
                    )
                ).all()
            )
            for guid, item in newest_by_guid.items():
                if have.get(guid, "failed") != "failed":
                    continue  # recorded: nothing to ask for
                if guid in known:
                    if item.id > known[guid]:
                        conn.execute(
                            update(redeliveries)
                            .where(redeliveries.c.guid == guid)
                            .values(github_id=item.id)
                        )
                    continue
                conn.execute(
                    insert(redeliveries).values(
                        guid=guid,
                        github_id=item.id,
                        event=item.event,
                        action=item.action,
                        delivered_at=_epoch(item.delivered_at),
                        state="pending",
                        first_seen_at=now,
                        detail=f"GitHub: {item.status} ({item.status_code})",
                    )
                )
                found.append(guid)
        return found

    # -- asking for redelivery -----------------------------------------------------

    def backoff(self, requests: int) -> float:
        """Seconds after the last ask before the next one."""
        return self.interval * float(min(2 ** max(requests - 1, 0), MAX_BACKOFF_INTERVALS))

    def _due(self, now: float) -> list[Any]:
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(redeliveries)
                .where(redeliveries.c.state == "pending")
                .where(
                    redeliveries.c.requested_at.is_(None)
                    | (redeliveries.c.requested_at <= now - self.interval)
                )
                .order_by(redeliveries.c.delivered_at)
            ).all()
        due = [
            r
            for r in rows
            if r.requested_at is None or r.requested_at <= now - self.backoff(r.requests)
        ]
        return due[:REQUESTS_PER_PASS]

    def _claim(self, row: Any, now: float) -> str:
        """``recorded``, ``gave-up``, ``claimed`` or ``taken`` (by another worker)."""
        with self.engine.begin() as conn:
            status = conn.execute(
                select(deliveries.c.status).where(deliveries.c.delivery_id == row.guid)
            ).scalar_one_or_none()
            if status is not None and status != "failed":
                self._close(conn, row.guid, "recorded", f"recorded by the intake ({status})")
                return "recorded"
            if row.requests >= MAX_REQUESTS or now - row.delivered_at > REDELIVERABLE_FOR:
                self._close(conn, row.guid, "gave-up", f"not recorded after {row.requests} asks")
                return "gave-up"
            # Compare-and-set on the ask count: of several workers that read the
            # same row, one moves it on and the others find it changed.
            claimed = conn.execute(
                update(redeliveries)
                .where(redeliveries.c.guid == row.guid, redeliveries.c.state == "pending")
                .where(redeliveries.c.requests == row.requests)
                .values(requested_at=now, requests=row.requests + 1)
            ).rowcount
        return "claimed" if claimed else "taken"

    @staticmethod
    def _close(conn: Any, guid: str, state: str, detail: str) -> None:
        conn.execute(
            update(redeliveries)
            .where(redeliveries.c.guid == guid)
            .values(state=state, detail=detail)
        )

    async def _ask(self, report: PassReport) -> None:
        now = self.clock()
        app = self.github.app()
        for row in await asyncio.to_thread(self._due, now):
            outcome = await asyncio.to_thread(self._claim, row, now)
            if outcome == "recorded":
                report.recorded.append(row.guid)
                continue
            if outcome == "gave-up":
                log.error(
                    "webhook delivery %s (%s.%s) was never recorded; giving up after %d asks",
                    row.guid,
                    row.event,
                    row.action,
                    row.requests,
                )
                report.gave_up.append(row.guid)
                continue
            if outcome != "claimed":
                continue
            try:
                await app.rest.apps.async_redeliver_webhook_delivery(row.github_id)
            except GitHubException as exc:
                if status_of(exc) in (404, 410, 422):
                    # Too old or gone: GitHub will not send it again, ever.
                    await asyncio.to_thread(self._give_up, row.guid, str(status_of(exc)))
                    report.gave_up.append(row.guid)
                    continue
                if await self._on_error(exc, f"redelivering {row.guid}"):
                    return
                continue
            report.requested.append(row.guid)

    def _give_up(self, guid: str, why: str) -> None:
        log.error("GitHub will not redeliver %s (answered %s); giving up", guid, why)
        with self.engine.begin() as conn:
            self._close(conn, guid, "gave-up", f"GitHub answered {why} to the redelivery")

    async def _on_error(self, exc: GitHubException, what: str) -> bool:
        """Log a failed call; True (stop the pass) when GitHub asked us to wait."""
        failure = classify(exc)
        if isinstance(failure, TransientError) and failure.next_retry_delay is not None:
            until = self.clock() + failure.next_retry_delay
            log.warning("delivery reconciler rate limited while %s; pausing", what)
            await asyncio.to_thread(self._pause_until, until)
            return True
        log.warning("delivery reconciler: %s failed: %s", what, failure)
        return False

    def _pause_until(self, until: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(scans).where(scans.c.name == SCAN).values(not_before=until))


_NEXT = re.compile(r'<([^>]*)>;\s*rel="next"')
_CURSOR = re.compile(r"[?&]cursor=([^&]+)")


def _next_cursor(link: str) -> str | None:
    found = _NEXT.search(link)
    if not found:
        return None
    cursor = _CURSOR.search(found.group(1))
    return cursor.group(1) if cursor else None


def _epoch(value: datetime | str) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.timestamp()


def pending_redeliveries(engine: Engine, *, state: str | None = None) -> list[Any]:
    """The redelivery records (for the CLI)."""
    query = select(redeliveries).order_by(redeliveries.c.delivered_at.desc())
    if state:
        query = query.where(redeliveries.c.state == state)
    with engine.connect() as conn:
        return list(conn.execute(query).all())
