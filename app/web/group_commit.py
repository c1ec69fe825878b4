"""Group commit: webhook deliveries that arrive together share one transaction.

Each delivery recorded alone pays a transaction of its own (BEGIN, COMMIT:
on PostgreSQL a WAL flush, on SQLite the write lock that concurrent writers
queue for, sleeping between tries) and a hop to a thread of its own, and
threads that take turns at the GIL and the write lock were most of the
intake's time under load (docs/history/benchmarks-2026-11.md, "Intake"). Here one writer
drains a queue on the store's threads: a delivery that finds it idle is
recorded at once, alone (no added latency); deliveries that arrive while a
transaction runs wait for it and then go together, at most ``max_batch`` per
transaction.

What each delivery is promised does not change:

- it is answered only after the transaction that recorded it committed;
- it affects only itself: :meth:`Intake.record` leaves the transaction as it
  found it but for its own record (a copy recorded already is a no-op
  ``INSERT``, a failing handler's writes are rolled back to its savepoint and
  the failure recorded), so a duplicate or a broken handler costs the others
  nothing;
- anything else (an error from one delivery's statements, a failed commit)
  rolls the whole transaction back, and then every delivery of it is recorded
  alone, as it would have been without grouping: kept as failed if its own
  handling breaks, 503 with Retry-After if the database is down. Never a 2xx
  for something not committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.exc import OperationalError

from app.engine import StoreThreads
from app.intake.pipeline import LOOK, Checked, Intake, IntakeResult
from app.operations.metrics import instruments

log = logging.getLogger("repairbot.intake")

#: Deliveries per transaction at most: bounds how long the write lock is held
#: and how much one failed commit sends down the one-by-one path.
MAX_BATCH = 64

Request = tuple[Mapping[str, str], bytes]
#: A delivery's answer, or what its own recording raised (that request fails alone).
Outcome = IntakeResult | Exception


def record_together(intake: Intake, requests: Sequence[Request]) -> list[Outcome]:
    """Check every request, record the signed ones in one transaction, and
    answer each; in order. Runs on the store's thread."""
    outcomes: list[Outcome | None] = []
    signed: list[tuple[int, Checked]] = []
    for index, (headers, body) in enumerate(requests):
        checked: Outcome | Checked
        try:
            checked = intake.check(headers, body)
        except Exception as exc:
            checked = exc
        if isinstance(checked, Checked):
            signed.append((index, checked))
            outcomes.append(None)
        else:
            outcomes.append(checked)
    if signed:
        _record(intake, signed, outcomes)
    done = [outcome for outcome in outcomes if outcome is not None]
    assert len(done) == len(requests)  # every request answered, in order
    return done


def _record(
    intake: Intake, signed: list[tuple[int, Checked]], outcomes: list[Outcome | None]
) -> None:
    try:
        with intake.store.transaction() as tx:
            earlier = intake.recorded(tx, [delivery.delivery_id for _, delivery in signed])
            looked_up: set[str] = set()
            for index, delivery in signed:
                key = delivery.delivery_id
                # A second copy within the group looks for itself (the first
                # may have been recorded here, just now).
                seen = earlier.get(key) if key not in looked_up else LOOK
                looked_up.add(key)
                before = len(tx.jobs)
                result = intake.record(tx, delivery, seen)
                outcomes[index] = replace(result, jobs=tx.jobs[before:])
    except Exception as exc:
        log.warning(
            "group commit of %d deliveries failed; recording each alone", len(signed), exc_info=True
        )
        # The database cannot be reached (or stays locked): once a delivery
        # alone is told 503 too, the rest would each wait for it in turn (a
        # connect timeout apiece) to hear the same.
        unreachable = isinstance(exc, OperationalError)
        unavailable: IntakeResult | None = None
        for index, delivery in signed:
            if unavailable is not None:
                outcomes[index] = unavailable
                continue
            try:
                outcomes[index] = outcome = intake.record_alone(delivery)
            except Exception as failure:
                outcomes[index] = failure
            else:
                if unreachable and outcome.status_code == 503:
                    unavailable = outcome


@dataclass
class _Waiting:
    request: Request
    answer: asyncio.Future[IntakeResult]


class GroupCommit:
    """The web process's one writer of deliveries (one per app)."""

    def __init__(self, intake: Intake, threads: StoreThreads, *, max_batch: int = MAX_BATCH):
        self.intake = intake
        self.threads = threads
        self.max_batch = max_batch
        #: Batches the writer ran (one transaction each, unless it failed and
        #: its deliveries were recorded one by one) and the deliveries in them.
        self.batches = 0
        self.deliveries = 0
        #: Deliveries in the transaction running now (0: the writer is idle).
        self.in_transaction = 0
        self._queue: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Deliveries queued for the next transaction."""
        return len(self._queue)

    async def receive(self, headers: Mapping[str, str], body: bytes) -> IntakeResult:
        """Answer one delivery once the transaction that recorded it committed."""
        answer: asyncio.Future[IntakeResult] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting((headers, body), answer))
        if self._writer is None:
            self._writer = asyncio.create_task(self._drain(), name="intake-writer")
        # A request cancelled while waiting leaves the writer and the others alone.
        return await asyncio.shield(answer)

    async def _drain(self) -> None:
        batch: list[_Waiting] = []
        try:
            while self._queue:
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                await self._commit(batch)
        except BaseException as exc:
            # Only a cancelled writer (the loop is closing) or a dead pool gets
            # here: no request may wait for an answer that will not come.
            stopped = RuntimeError(f"intake writer stopped: {exc!r}")
            for waiting in [*batch, *self._queue]:
                if not waiting.answer.done():
                    waiting.answer.set_exception(stopped)
            self._queue.clear()
            raise
        finally:
            self._writer = None

    async def _commit(self, batch: list[_Waiting]) -> None:
        requests = [waiting.request for waiting in batch]
        self.in_transaction = len(batch)
        try:
            outcomes = await self.threads.run(record_together, self.intake, requests)
        finally:
            self.in_transaction = 0
        self.batches += 1
        self.deliveries += len(batch)
        instruments().intake_batch.observe(len(batch))
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if waiting.answer.done():
                continue
            if isinstance(outcome, Exception):
                waiting.answer.set_exception(outcome)
            else:
                waiting.answer.set_result(outcome)
