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

On PostgreSQL there are several writers (``writers_for``): a transaction's
round trips, not its CPU, are most of its time there (the server is another
process, each statement a wait), so one writer left the web process idle
while a group's statements crossed one by one, and per-request transactions
on separate connections (the durable floor, bench/intake.py) overtook it. A
delivery that finds every writer busy queues for the first to finish. SQLite
keeps one: it has one write lock, and a second writer would only wait for it
in SQLite's sleeping busy handler.

What each delivery is promised does not change:

- it is answered only after the transaction that recorded it committed;
- it affects only itself. The group goes first through
  :meth:`Intake.record_group` (no savepoint per delivery, one ``INSERT`` for
  all the records); whatever would need one delivery's writes taken back
  alone (a failing handler, a copy committed meanwhile, a failed delivery
  handled again) rolls that attempt back whole, and the group is recorded
  again with :meth:`Intake.record`, which leaves the transaction as it found
  it but for its own record (a copy recorded already is a no-op ``INSERT``,
  a failing handler's writes are rolled back to its savepoint and the
  failure recorded), so a duplicate or a broken handler costs the others
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

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app.engine import StoreThreads, checkpoint_wal
from app.intake.pipeline import LOOK, Checked, Intake, IntakeResult, SavepointsNeeded
from app.operations.metrics import instruments

log = logging.getLogger("repairbot.intake")

#: Deliveries per transaction at most: bounds how long the write lock is held
#: and how much one failed commit sends down the one-by-one path.
MAX_BATCH = 64
#: Concurrent transactions on PostgreSQL: enough to overlap a few groups'
#: round trips; more would only split the groups (each one a COMMIT more).
POSTGRES_WRITERS = 4
#: SQLite: deliveries recorded between two WAL checkpoints, which run beside
#: the writer instead of inside one of its COMMITs (SQLite's own rule, a
#: checkpoint in the COMMIT that finds the WAL over 1,000 pages, made the
#: one writer and everything queued behind it wait for the copy and the
#: sync: a fifth of its time, and the longest answers). A delivery with the
#: benchmark's payloads (15 KB) is about 5 pages of WAL.
SQLITE_CHECKPOINT_EVERY = 200

Request = tuple[Mapping[str, str], bytes]
#: A delivery's answer, or what its own recording raised (that request fails alone).
Outcome = IntakeResult | Exception


def record_together(
    intake: Intake, requests: Sequence[Request], *, checkpoint: bool = True
) -> list[Outcome]:
    """Check every request, record the signed ones in one transaction, and
    answer each; in order. Runs on the store's thread. ``checkpoint=False``:
    the transaction's COMMIT leaves SQLite's WAL checkpoint to the caller
    (``GroupCommit`` runs it beside the writer)."""
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
        _record(intake, signed, outcomes, checkpoint)
    done = [outcome for outcome in outcomes if outcome is not None]
    assert len(done) == len(requests)  # every request answered, in order
    return done


def _record(
    intake: Intake,
    signed: list[tuple[int, Checked]],
    outcomes: list[Outcome | None],
    checkpoint: bool,
) -> None:
    try:
        try:
            _record_fast(intake, signed, outcomes, checkpoint)
        except SavepointsNeeded as reason:
            # Rolled back whole: again, each delivery in a savepoint of its own.
            log.info("group of %d recorded with savepoints: %s", len(signed), reason)
            _record_with_savepoints(intake, signed, outcomes, checkpoint)
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


def _record_fast(
    intake: Intake,
    signed: list[tuple[int, Checked]],
    outcomes: list[Outcome | None],
    checkpoint: bool,
) -> None:
    """The group in one transaction with one INSERT of all its records
    (:meth:`Intake.record_group`): about half the statements per delivery.

    No lookup of earlier records first: a fresh delivery id is the rule (GitHub
    sends a copy only when asked to, or when an answer was lost), and the
    INSERT's RETURNING finds a copy anyway, recorded before or committed
    meanwhile alike. Then the group is rolled back whole and recorded again
    with savepoints, which looks its copies up: a copy costs its group a
    second pass, every other group a round trip less."""
    with intake.store.transaction(checkpoint=checkpoint) as tx:
        results = intake.record_group(tx, [(delivery, None) for _, delivery in signed])
    for (index, _), result in zip(signed, results, strict=True):
        outcomes[index] = result


def _record_with_savepoints(
    intake: Intake,
    signed: list[tuple[int, Checked]],
    outcomes: list[Outcome | None],
    checkpoint: bool,
) -> None:
    with intake.store.transaction(checkpoint=checkpoint) as tx:
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


def checkpoint_every_for(engine: Engine) -> int:
    """Deliveries between the writer's WAL checkpoints on ``engine`` (0: the
    database has no WAL to keep, each COMMIT does as it always does)."""
    return SQLITE_CHECKPOINT_EVERY if engine.dialect.name == "sqlite" else 0


def writers_for(engine: Engine, threads: int) -> int:
    """How many transactions of deliveries may run at once on ``engine``."""
    if engine.dialect.name == "postgresql":
        return max(1, min(POSTGRES_WRITERS, threads))
    return 1


@dataclass
class _Waiting:
    request: Request
    answer: asyncio.Future[IntakeResult]


class GroupCommit:
    """The web process's writers of deliveries (one set per app)."""

    def __init__(
        self,
        intake: Intake,
        threads: StoreThreads,
        *,
        max_batch: int = MAX_BATCH,
        writers: int = 1,
        checkpoint_every: int = 0,
    ):
        self.intake = intake
        self.threads = threads
        self.max_batch = max_batch
        #: SQLite: deliveries between WAL checkpoints run beside the writer
        #: (``checkpoint_wal``); 0: each COMMIT checkpoints as SQLite decides.
        self.checkpoint_every = checkpoint_every
        #: Checkpoints started so far, and deliveries recorded since the last.
        self.checkpoints = 0
        self._since_checkpoint = 0
        self._checkpointing: asyncio.Task[None] | None = None
        #: Transactions of deliveries that may run at once.
        self.writers = writers
        #: Batches the writers ran (one transaction each, unless it failed and
        #: its deliveries were recorded one by one) and the deliveries in them.
        self.batches = 0
        self.deliveries = 0
        #: Deliveries in the transactions running now (0: every writer is idle).
        self.in_transaction = 0
        #: The most transactions that ran at once so far.
        self.most_at_once = 0
        self._queue: list[_Waiting] = []
        self._running: set[asyncio.Task[None]] = set()
        self._at_once = 0

    @property
    def waiting(self) -> int:
        """Deliveries queued for the next transaction."""
        return len(self._queue)

    async def receive(self, headers: Mapping[str, str], body: bytes) -> IntakeResult:
        """Answer one delivery once the transaction that recorded it committed."""
        answer: asyncio.Future[IntakeResult] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting((headers, body), answer))
        # Every running writer takes the queue again when its transaction
        # ends: a new one starts only while fewer than ``writers`` run.
        if len(self._running) < self.writers:
            self._running.add(asyncio.create_task(self._drain(), name="intake-writer"))
        # A request cancelled while waiting leaves the writer and the others alone.
        return await asyncio.shield(answer)

    async def _drain(self) -> None:
        batch: list[_Waiting] = []
        try:
            while self._queue:
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                await self._commit(batch)
                batch = []
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
            # Here, not in a done callback: between the last look at the queue
            # and a callback, a delivery could queue and find no writer to come.
            task = asyncio.current_task()
            assert task is not None
            self._running.discard(task)

    async def _commit(self, batch: list[_Waiting]) -> None:
        requests = [waiting.request for waiting in batch]
        self.in_transaction += len(batch)
        self._at_once += 1
        self.most_at_once = max(self.most_at_once, self._at_once)
        try:
            outcomes = await self.threads.run(
                record_together, self.intake, requests, checkpoint=not self.checkpoint_every
            )
        finally:
            self.in_transaction -= len(batch)
            self._at_once -= 1
        self.batches += 1
        self.deliveries += len(batch)
        self._maybe_checkpoint(len(batch))
        instruments().intake_batch.observe(len(batch))
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if waiting.answer.done():
                continue
            if isinstance(outcome, Exception):
                waiting.answer.set_exception(outcome)
            else:
                waiting.answer.set_result(outcome)

    def _maybe_checkpoint(self, recorded: int) -> None:
        """Start a WAL checkpoint on another of the store's threads once
        ``checkpoint_every`` deliveries were recorded since the last one
        started, unless one runs still: the writer goes on meanwhile."""
        if not self.checkpoint_every:
            return
        self._since_checkpoint += recorded
        if self._since_checkpoint < self.checkpoint_every:
            return
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        self._since_checkpoint = 0
        self.checkpoints += 1
        self._checkpointing = asyncio.create_task(self._checkpoint(), name="intake-checkpoint")

    async def _checkpoint(self) -> None:
        try:
            await self.threads.run(checkpoint_wal, self.intake.store.engine)
        except Exception:
            # A checkpoint that fails leaves the WAL longer; the next one (or
            # any other connection's COMMIT) copies it back.
            log.warning("WAL checkpoint beside the intake writer failed", exc_info=True)
