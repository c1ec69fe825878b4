"""arq's enqueue, and its poll with the start of the jobs it finds, each as
one Redis round trip.

arq 0.28 enqueues with WATCH, EXISTS and MULTI/EXEC (three round trips),
polls with ZRANGEBYSCORE (one) and starts each job it found with WATCH,
EXISTS, ZSCORE and MULTI/EXEC (four), all on the path of every job a run
sends through Redis. These Lua scripts do the same checks and writes
atomically on the server, in one round trip each, on
arq's own keys and formats: a job written here is read by arq's worker, and
the jobs arq writes are started here. Behaviour is arq's:

- enqueue: nothing is written when the job id's job key or result key
  exists (a double send is one job); else the job key with its expiry and
  the queue entry with its score;
- take (poll and start): arq's poll reads the due ids; each that has no
  in-progress key is taken (the in-progress key set, with arq's timeout), up
  to the consumer's free slots. A job a crashed worker took therefore keeps
  its keys exactly as under arq's own start. The script builds the
  in-progress key names from arq's prefix itself, so it needs every key on
  one server (no Redis Cluster, which arq does not support either).

Scripts run by SHA; a server that does not know one yet (a restart, a
flush of the script cache) is sent it once and the call repeated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError

#: KEYS: job key, result key, queue. ARGV: expiry ms, job bytes, score, job id.
ENQUEUE = """
if redis.call('exists', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('psetex', KEYS[1], ARGV[1], ARGV[2])
redis.call('zadd', KEYS[3], ARGV[3], ARGV[4])
return 1
"""

#: KEYS: queue. ARGV: now ms, ids to read, jobs to take, in-progress timeout ms,
#: in-progress key prefix. Returns id, score, id, score... of the jobs taken.
#: Reads past jobs in progress (a busy consumer's, a dead one's) as arq's poll
#: does, so they cannot hide due jobs behind them.
TAKE = """
local ids = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local taken = {}
local want = tonumber(ARGV[3])
for _, id in ipairs(ids) do
    if #taken >= 2 * want then break end
    local key = ARGV[5] .. id
    if redis.call('exists', key) == 0 then
        redis.call('psetex', key, ARGV[4], '1')
        table.insert(taken, id)
        table.insert(taken, redis.call('zscore', KEYS[1], id))
    end
end
return taken
"""


class Script:
    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Add a call to ``pipe`` (see :func:`execute`)."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    async def __call__(self, redis: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)  # type: ignore[misc]
        except NoScriptError:
            await redis.script_load(self.source)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)  # type: ignore[misc]


async def execute(redis: Redis, build: Any, scripts: Sequence[Script]) -> list[Any]:
    """Run the pipeline ``build(pipe)`` fills, in one round trip; if the
    server lacked a script, load ``scripts`` and run it once more (each of
    these scripts may run twice: a second run finds its work done)."""
    for attempt in (1, 2):
        async with redis.pipeline(transaction=False) as pipe:
            build(pipe)
            try:
                return await pipe.execute()
            except NoScriptError:
                if attempt == 2:
                    raise
        for script in scripts:
            await redis.script_load(script.source)
    raise AssertionError("unreachable")


ENQUEUE_SCRIPT = Script(ENQUEUE)
TAKE_SCRIPT = Script(TAKE)
