"""arq's enqueue, and its poll with the start of the jobs it finds, each as
one Redis round trip.

arq 0.28 enqueues with WATCH, EXISTS and MULTI/EXEC (three round trips),
polls with ZRANGEBYSCORE (one), starts each job it found with WATCH, EXISTS,
ZSCORE and MULTI/EXEC (four), then reads the job (a pipeline) and finishes
it (another), all on the path of every job a run sends through Redis. These
Lua scripts do the same checks and writes atomically on the server, in one
round trip each, on arq's own keys and formats: a job written here is read
by arq's worker, and the jobs arq writes are taken here. Behaviour is arq's:

- enqueue: nothing is written when the job id's job key or result key
  exists (a double send is one job); else the job key with its expiry and
  the queue entry with its score;
- start (arq's own jobs: the reconciler's cron): the job is taken when no
  in-progress key exists and its score is due; the in-progress key is then
  set, with arq's timeout, and arq's ``run_job`` and ``finish_job`` follow;
- take (the poll, for the engine's jobs): the due ids are read as arq's
  poll reads them; each engine job among them that passes the same checks
  leaves Redis at once (queue entry, job key, retry key) and its bytes come
  back, up to the consumer's free slots. Ids that are not the engine's (the
  reconciler's cron) come back as ids, for the start above. An engine
  job only hands its work to the worker's pool (the database is the record,
  the outbox row stays until the work is claimed), so there is nothing for
  arq to track between the start and the finish: a worker that dies after
  a take leaves no key behind, and the relay copies the job like any job
  missing from Redis. An in-progress key still blocks the take, so a job a
  worker of an older release started is left to it. The take names the keys
  of the ids it reads itself (from arq's prefixes), so every key must be on
  one server: no Redis Cluster, which arq does not support either.

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

#: KEYS: in-progress key, queue. ARGV: job id, now ms, in-progress timeout ms.
#: Returns the job's score, or nil when it is not to be started here.
START = """
if redis.call('exists', KEYS[1]) == 1 then return false end
local score = redis.call('zscore', KEYS[2], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return false end
redis.call('psetex', KEYS[1], ARGV[3], '1')
return score
"""

#: KEYS: queue. ARGV: now ms, ids to read, free slots, job key prefix, retry
#: key prefix, in-progress key prefix, then the engine's job id prefixes.
#: Returns {id, bytes, id, bytes...} of the engine jobs taken and {id...} of
#: other due ids to start (arq's own jobs), together no more than the free
#: slots. Ids with an in-progress key (arq's jobs running, or a job an older
#: release started) are read past, as arq's poll does, so they neither take
#: a slot nor hide the due jobs behind them. A queue entry whose job key
#: expired is dropped (arq's worker drops it too) and takes no slot.
TAKE = """
local ids = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local free = tonumber(ARGV[3])
local taken, others = {}, {}
for _, id in ipairs(ids) do
    if free <= 0 then break end
    if redis.call('exists', ARGV[6] .. id) == 0 then
        local engine = false
        for i = 7, #ARGV do
            if string.sub(id, 1, #ARGV[i]) == ARGV[i] then engine = true end
        end
        if not engine then
            table.insert(others, id)
            free = free - 1
        else
            local job = redis.call('get', ARGV[4] .. id)
            redis.call('zrem', KEYS[1], id)
            redis.call('del', ARGV[4] .. id, ARGV[5] .. id)
            if job then
                table.insert(taken, id)
                table.insert(taken, job)
                free = free - 1
            end
        end
    end
end
return {taken, others}
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
START_SCRIPT = Script(START)
TAKE_SCRIPT = Script(TAKE)
