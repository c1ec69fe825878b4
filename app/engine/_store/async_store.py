"""The one async boundary around the store.

The store is synchronous (SQLAlchemy Core, one short transaction per call).
Called straight from a coroutine, every round trip to PostgreSQL stalls every
other coroutine of the process: with a few hundred runs in flight that is the
whole worker waiting on one claim. Every engine caller on the event loop
(worker, reconciler, relay, liveness, client operations) goes through
:meth:`StoreThreads.run` instead, which runs the call on a bounded pool of
threads sized to the database connection pool: more threads than connections
would only queue inside SQLAlchemy's pool, fewer would leave connections idle.

Cancellation never cuts a call short: a call that started finishes (its
transaction commits or rolls back as a whole) before the caller sees the
CancelledError, so a drain never leaves a half-done write, and nothing of a
call runs after its caller has gone. Its result is dropped, as it is when a
process dies right after a commit: a workflow task's jobs are still in the
outbox (the relay sends them), and an attempt claimed in that instant is
released when this worker retires or falls silent.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool

P = ParamSpec("P")
T = TypeVar("T")

#: Threads when the engine's pool has no fixed size (SQLite's default pool).
DEFAULT_THREADS = 8


def threads_for(engine: Engine) -> int:
    """As many threads as the engine keeps connections."""
    pool = engine.pool
    if isinstance(pool, QueuePool):
        return max(1, pool.size())
    return DEFAULT_THREADS


class StoreThreads:
    """A bounded thread pool for blocking database calls made from coroutines."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="store")

    @classmethod
    def for_engine(cls, engine: Engine) -> StoreThreads:
        return cls(threads_for(engine))

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on the pool, with the caller's context
        variables (log context). See the module docstring for cancellation."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        future = loop.run_in_executor(self._executor, call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise  # the pool itself was shut down
            # The call runs on regardless: let it finish (its transaction
            # commits or rolls back whole) before the cancellation goes on.
            await asyncio.wait([future])
            raise

    def close(self) -> None:
        """Let running calls finish; start no new ones."""
        self._executor.shutdown(wait=False, cancel_futures=True)
