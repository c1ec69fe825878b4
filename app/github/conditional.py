"""Conditional requests: a re-read costs GitHub's rate limit nothing while
nothing changed.

A run waiting for review re-reads its issue, pull request, reviews and
comments every drift-check interval. Each answer GitHub gives to a GET carries
an ``ETag``; sent back as ``If-None-Match``, GitHub answers ``304 Not Modified``
without a body and does not count the request against the installation's
primary rate limit. :class:`ConditionalTransport` does this under githubkit
for every GET of one installation's client: it keeps the last answer in a
:class:`ConditionalStore` shared by every worker (the database, not one
worker's disk, so a run resumed on another machine still revalidates), and
turns a 304 back into the stored 200 for the caller.

Freshness is never traded for it: every read still goes to GitHub, which alone
decides whether the stored answer is current (unlike a time-based HTTP cache,
which githubkit's ``http_cache`` is and repairbot keeps off).

Only reads made inside :func:`revalidating` (the drift check's) are stored and
revalidated. A run's other reads are made once (a file, a permission, a
branch's head) and a stored copy would never be asked again: storing and
looking up each of them was a database read and write per GET for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import httpx
from sqlalchemy import Engine, Table, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from app.app_tables import GitHubConditional

if TYPE_CHECKING:
    from app.github.rate_budget import RateBudget

#: Answers larger than this are not kept (a drift check's reads are a few KiB).
MAX_STORED_BYTES = 1024 * 1024
#: Headers that describe the transfer of the original answer, not its content.
_TRANSFER = frozenset({"content-encoding", "content-length", "transfer-encoding", "etag"})
_table = GitHubConditional.__table__  # type: ignore[attr-defined]
#: Whether the reads of the current task are ones that will be repeated.
_REVALIDATING: ContextVar[bool] = ContextVar("revalidating", default=False)


@contextlib.contextmanager
def revalidating() -> Iterator[None]:
    """GETs made inside are revalidated with, and stored for, later re-reads:
    the reads a waiting run repeats every drift-check interval."""
    token = _REVALIDATING.set(True)
    try:
        yield
    finally:
        _REVALIDATING.reset(token)


@dataclass(frozen=True)
class Stored:
    etag: str
    content_type: str
    body: bytes


class ConditionalStore(Protocol):
    async def load(self, installation_id: int, key: str) -> Stored | None: ...

    async def save(self, installation_id: int, key: str, stored: Stored) -> None: ...


def request_key(request: httpx.Request) -> str:
    """What an answer depends on besides the principal: the URL with its
    query, and the representation asked for."""
    parts = [
        str(request.url),
        request.headers.get("accept", ""),
        request.headers.get("x-github-api-version", ""),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class MemoryConditionalStore:
    """One process's store (tests, and clients without a database), bounded."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[int, str], Stored] = OrderedDict()

    async def load(self, installation_id: int, key: str) -> Stored | None:
        found = self._entries.get((installation_id, key))
        if found is not None:
            self._entries.move_to_end((installation_id, key))
        return found

    async def save(self, installation_id: int, key: str, stored: Stored) -> None:
        self._entries[(installation_id, key)] = stored
        self._entries.move_to_end((installation_id, key))
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class DatabaseConditionalStore:
    """The store every worker shares: one row per installation and request."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self._now = clock

    async def load(self, installation_id: int, key: str) -> Stored | None:
        return await asyncio.to_thread(self._load, installation_id, key)

    async def save(self, installation_id: int, key: str, stored: Stored) -> None:
        await asyncio.to_thread(self._save, installation_id, key, stored)

    def prune(self, older_than_seconds: float) -> int:
        """Forget answers not refreshed for a while (a run that stopped waiting)."""
        cutoff = self._now() - older_than_seconds
        with self.engine.begin() as conn:
            return int(conn.execute(delete(_table).where(_table.c.stored_at < cutoff)).rowcount)

    def _load(self, installation_id: int, key: str) -> Stored | None:
        query = select(_table.c.etag, _table.c.content_type, _table.c.body).where(
            _table.c.installation_id == installation_id, _table.c.request_key == key
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else Stored(row.etag, row.content_type, bytes(row.body))

    def _save(self, installation_id: int, key: str, stored: Stored) -> None:
        where = (_table.c.installation_id == installation_id, _table.c.request_key == key)
        row = {
            "etag": stored.etag,
            "content_type": stored.content_type,
            "body": stored.body,
            "stored_at": self._now(),
        }
        upsert = _UPSERTS.get(self.engine.dialect.name)
        if upsert is not None:
            # One statement, one transaction: most answers are stored for the
            # first time, where update-then-insert paid two.
            statement = upsert(_table).values(
                installation_id=installation_id, request_key=key, **row
            )
            statement = statement.on_conflict_do_update(
                index_elements=[_table.c.installation_id, _table.c.request_key], set_=row
            )
            with self.engine.begin() as conn:
                conn.execute(statement)
            return
        # Update, else insert; two workers storing the same answer at once may
        # both insert: the loser's duplicate is simply dropped.
        with self.engine.begin() as conn:
            if conn.execute(_table.update().where(*where).values(**row)).rowcount:
                return
        with contextlib.suppress(IntegrityError), self.engine.begin() as conn:
            conn.execute(
                _table.insert().values(installation_id=installation_id, request_key=key, **row)
            )


#: ``INSERT ... ON CONFLICT DO UPDATE`` where the database has it.
_UPSERTS: dict[str, Callable[[Table], postgresql.Insert | sqlite.Insert]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


class ConditionalTransport(httpx.AsyncBaseTransport):
    """One installation's view of the shared transport: GETs made inside
    :func:`revalidating` revalidated with the stored ``ETag``, and the shared
    rate budget consulted and kept current around every request (when one is
    given)."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        installation_id: int,
        store: ConditionalStore,
        budget: RateBudget | None = None,
    ) -> None:
        self.inner = inner
        self.installation_id = installation_id
        self.store = store
        self.budget = budget

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        conditional = (
            request.method == "GET"
            and "if-none-match" not in request.headers
            and _REVALIDATING.get()
        )
        key = request_key(request) if conditional else ""
        stored = await self.store.load(self.installation_id, key) if conditional else None
        if stored is not None:
            request.headers["If-None-Match"] = stored.etag
        if self.budget is not None:
            await self.budget.before(self.installation_id, mutation=request.method != "GET")
        response = await self.inner.handle_async_request(request)
        if self.budget is not None:
            await self.budget.after(self.installation_id, response)
        if stored is not None and response.status_code == 304:
            await response.aclose()
            headers = _content_headers(response.headers)
            headers["content-type"] = stored.content_type
            headers["etag"] = stored.etag
            return httpx.Response(
                200,
                headers=headers,
                content=stored.body,
                request=request,
                extensions=response.extensions,
            )
        tag = response.headers.get("etag")
        if not (conditional and response.status_code == 200 and tag):
            return response
        body = await response.aread()
        if len(body) <= MAX_STORED_BYTES:
            content_type = response.headers.get("content-type", "application/json")
            await self.store.save(self.installation_id, key, Stored(tag, content_type, body))
        headers = _content_headers(response.headers)
        headers["etag"] = tag
        return httpx.Response(
            200, headers=headers, content=body, request=request, extensions=response.extensions
        )

    async def aclose(self) -> None:
        """githubkit closes a client after each request; the pool underneath is
        shared (see :mod:`app.github.transport`), so nothing closes here."""


def _content_headers(headers: httpx.Headers) -> dict[str, str]:
    """The answer's headers without those of its transfer (the body handed on
    is decoded and whole)."""
    return {name: value for name, value in headers.items() if name.lower() not in _TRANSFER}
