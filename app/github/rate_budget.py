"""One rate budget per installation, shared by every worker process.

GitHub counts an installation's requests in one hourly window, whichever
worker sends them, and a secondary rate limit stops them all at once. Each
worker therefore reads and writes the same record (the ``github_rate_budget``
table): what the last answer said about the window (``x-ratelimit-*``) and
until when GitHub asked everyone to wait (``retry-after``).

Before a request:

- while a secondary limit holds, nothing is sent;
- a read waits (raises :class:`RateBudgetWait`, a transient failure whose
  retry is scheduled after the reset, holding no worker meanwhile) once no
  more than the reserve (``reserve`` of the limit) is left in the window;
- a mutation goes on into the reserve until nothing is left: finishing a
  run's effects matters more than re-reading.

The record is read at most every ``refresh`` seconds per process and written
when an answer moves it; it is advice that only ever delays requests, so a
stale copy costs at most a request GitHub itself refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from app.app_tables import GitHubRateBudget
from app.engine import TransientError
from app.github.errors import SECONDARY_LIMIT_DELAY, rate_limit_delay

_table = GitHubRateBudget.__table__  # type: ignore[attr-defined]
#: Share of the hourly limit kept for mutations.
DEFAULT_RESERVE = 0.1


class RateBudgetWait(TransientError):
    """The installation's budget says: not now. Retried after ``next_retry_delay``."""


@dataclass
class BudgetState:
    limit: int = 5000
    remaining: int = 5000
    reset_at: float = 0.0
    blocked_until: float = 0.0
    #: When this process last read the shared record (monotonic seconds).
    read_at: float = float("-inf")


class RateBudget:
    def __init__(
        self,
        engine: Engine | None,
        *,
        reserve: float = DEFAULT_RESERVE,
        refresh: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.reserve = reserve
        self.refresh = refresh
        self._now = clock
        self._states: dict[int, BudgetState] = {}

    async def before(self, installation_id: int, *, mutation: bool) -> None:
        state = await self._state(installation_id)
        now = self._now()
        if state.blocked_until > now:
            raise RateBudgetWait(
                f"installation {installation_id} is under GitHub's secondary rate limit",
                next_retry_delay=state.blocked_until - now,
            )
        if state.reset_at <= now:
            return  # a new window: whatever was spent is back
        floor = 0 if mutation else int(state.limit * self.reserve)
        if state.remaining <= floor:
            kind = "mutations" if mutation else "reads"
            raise RateBudgetWait(
                f"installation {installation_id} has {state.remaining} of {state.limit} "
                f"requests left this hour; {kind} wait for the reset",
                next_retry_delay=state.reset_at - now + 1.0,
            )

    async def after(self, installation_id: int, response: httpx.Response) -> None:
        state = self._states.setdefault(installation_id, BudgetState())
        headers = response.headers
        changed = False
        if headers.get("x-ratelimit-resource", "core") == "core":
            try:
                limit = int(headers["x-ratelimit-limit"])
                remaining = int(headers["x-ratelimit-remaining"])
                reset_at = float(headers["x-ratelimit-reset"])
            except (KeyError, ValueError):
                pass
            else:
                changed = (limit, remaining, reset_at) != (
                    state.limit,
                    state.remaining,
                    state.reset_at,
                )
                state.limit, state.remaining, state.reset_at = limit, remaining, reset_at
        if response.status_code in (403, 429):
            await response.aread()  # small; the caller still reads it afterwards
            secondary = (
                "retry-after" in headers
                or response.status_code == 429
                or "secondary rate limit" in response.text.lower()
            )
            if secondary:
                delay = rate_limit_delay(response, now=self._now) or SECONDARY_LIMIT_DELAY
                state.blocked_until = self._now() + delay
                changed = True
        if changed and self._worth_sharing(state):
            await asyncio.to_thread(self._write, installation_id, state)

    def _worth_sharing(self, state: BudgetState) -> bool:
        """Write the record when other workers' decisions could change: near
        the reserve, under a secondary limit, or every 1% of the limit spent."""
        near = state.remaining <= 2 * int(state.limit * self.reserve)
        step = max(1, state.limit // 100)
        return near or state.blocked_until > self._now() or state.remaining % step == 0

    async def _state(self, installation_id: int) -> BudgetState:
        state = self._states.setdefault(installation_id, BudgetState())
        if self.engine is not None and time.monotonic() - state.read_at >= self.refresh:
            shared = await asyncio.to_thread(self._read, installation_id)
            state.read_at = time.monotonic()
            if shared is not None:
                # The lower "remaining" of the same window wins: another worker
                # may have spent more than this one has seen.
                limit, remaining, reset_at, blocked_until = shared
                if reset_at > state.reset_at or (
                    reset_at == state.reset_at and remaining < state.remaining
                ):
                    state.limit, state.remaining, state.reset_at = limit, remaining, reset_at
                state.blocked_until = max(state.blocked_until, blocked_until)
        return state

    def _read(self, installation_id: int) -> tuple[int, int, float, float] | None:
        assert self.engine is not None
        query = select(
            _table.c.limit, _table.c.remaining, _table.c.reset_at, _table.c.blocked_until
        ).where(_table.c.installation_id == installation_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def _write(self, installation_id: int, state: BudgetState) -> None:
        if self.engine is None:
            return
        values = {
            "limit": state.limit,
            "remaining": state.remaining,
            "reset_at": state.reset_at,
            "blocked_until": state.blocked_until,
            "updated_at": self._now(),
        }
        where = _table.c.installation_id == installation_id
        with self.engine.begin() as conn:
            if conn.execute(_table.update().where(where).values(**values)).rowcount:
                return
        # Two workers writing the first record at once: either's is as good.
        with contextlib.suppress(IntegrityError), self.engine.begin() as conn:
            conn.execute(_table.insert().values(installation_id=installation_id, **values))
