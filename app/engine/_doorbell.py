"""The doorbell: Redis pub/sub that wakes arq consumers when a job is enqueued.

arq finds jobs by polling its queue (a sorted set). Polled often, every idle
consumer costs Redis and CPU all the time; polled rarely, every job waits out
the delay. So the dispatcher rings (``PUBLISH`` on a channel per queue) after
it enqueues jobs that are due now, and each worker process keeps one
subscription that wakes the consumer of that queue at once. The poll delay is
then only the fallback, and can be long.

Like the queue itself, a ring is a hint, never a record: pub/sub delivers to
whoever listens at that instant and keeps nothing. A ring lost (the
subscriber reconnecting, Redis restarted or flushed, a dead connection not
yet noticed) costs that job at most one poll delay, never the job. Jobs
deferred to a later time (timers, retries with backoff) get no ring: pub/sub
cannot ring at a due time, so they start by the poll, at most one poll delay
after they are due. After (re)subscribing, the subscriber wakes every
consumer once, since rings sent while it was away are gone.

Channels name the Redis database as well as the queue: pub/sub channels are
shared by every database of a server, queues are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline, PubSub
from redis.exceptions import RedisError

log = logging.getLogger("repairbot.dispatch")

CHANNEL_PREFIX = "repairbot:doorbell"
#: A silent subscription is pinged after this many seconds, and given up as
#: dead (and re-made) when the pong does not come within as long again.
KEEPALIVE = 30.0


def channel(database: int, queue: str) -> str:
    return f"{CHANNEL_PREFIX}:{database}:{queue}"


async def ring(redis: Redis, queues: Iterable[str]) -> None:
    """Ring each queue once, in one round trip."""
    names = sorted(set(queues))
    if not names:
        return
    async with redis.pipeline(transaction=False) as pipe:
        add_rings(pipe, names)
        await pipe.execute()


def add_rings(pipe: Pipeline, queues: Iterable[str]) -> None:
    """Add a ring of each of ``queues`` to ``pipe`` (to go with other commands)."""
    database = int(pipe.connection_pool.connection_kwargs.get("db", 0))
    for queue in sorted(set(queues)):
        pipe.publish(channel(database, queue), b"")


class Doorbell:
    """One worker process's subscription, with one wake-up per queue.

    Each queue is to have a single waiter (its arq consumer): :meth:`wait`
    consumes the ring it was woken by."""

    def __init__(
        self,
        settings: RedisSettings,
        queues: Sequence[str],
        *,
        keepalive: float = KEEPALIVE,
        max_backoff: float = 5.0,
    ) -> None:
        self.settings = settings
        self.keepalive = keepalive
        self.max_backoff = max_backoff
        self._by_channel = {channel(settings.database, q): q for q in queues}
        self._rung = {q: asyncio.Event() for q in queues}
        self._task: asyncio.Task[None] | None = None
        #: Times the subscription was (re)made; tests and logs read it.
        self.subscriptions = 0
        self.subscribed = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="arq-doorbell")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self, queue: str) -> None:
        """Ring from within this process (a consumer's slot came free)."""
        event = self._rung.get(queue)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        for event in self._rung.values():
            event.set()

    async def wait(self, queue: str, timeout: float) -> bool:
        """Wait for a ring on ``queue`` for at most ``timeout`` seconds; true
        if it rang. A ring that came while the consumer was busy polling is
        kept, so the consumer polls again at once."""
        event = self._rung[queue]
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        event.clear()
        return True

    async def _listen_forever(self) -> None:
        delay = 0.2
        while True:
            try:
                await self._listen()
            except (RedisError, OSError) as exc:
                log.warning("doorbell lost Redis (%s); consumers poll until it is back", exc)
            self.subscribed.clear()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_backoff)

    async def _listen(self) -> None:
        redis: ArqRedis = await create_pool(self.settings)
        pubsub = redis.pubsub()
        try:
            await pubsub.subscribe(*self._by_channel)
            self.subscriptions += 1
            self.subscribed.set()
            # Rings sent while there was no subscription are lost: poll now.
            self.wake_all()
            await self._deliver(pubsub)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), 2.0)  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(redis.aclose(close_connection_pool=True), 2.0)

    async def _deliver(self, pubsub: PubSub) -> None:
        awaiting_pong = False
        while True:
            # Subscription notices are read too: None then only means silence.
            message = await pubsub.get_message(timeout=self.keepalive)
            if message is None:
                if awaiting_pong:
                    # A connection that died without a word (no RST) never errors.
                    raise ConnectionError("the doorbell subscription went silent")
                await pubsub.ping()
                awaiting_pong = True
                continue
            awaiting_pong = False
            if message["type"] == "message":
                name = message["channel"]
                queue = self._by_channel.get(name.decode() if isinstance(name, bytes) else name)
                if queue is not None:
                    self._rung[queue].set()
