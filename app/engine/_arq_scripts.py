"""arq's enqueue and job start, each as one Redis round trip.

arq 0.28 enqueues with WATCH, EXISTS and MULTI/EXEC (three round trips) and
starts a job with WATCH, EXISTS, ZSCORE and MULTI/EXEC (four), then reads
the job (a pipeline) and finishes it (another), all on the path of every job
a run sends through Redis. These Lua scripts do the same checks and writes
atomically on the server, in one round trip each, on arq's own keys and
formats: a job written here is read by arq's worker, and the jobs arq writes
are taken here. Behaviour is arq's:

- enqueue: nothing is written when the job id's job key or result key
  exists (a double send is one job); else the job key with its expiry and
  the queue entry with its score;
- start (arq's own jobs: the reconciler's cron): the job is taken when no
  in-progress key exists and its score is due; the in-progress key is then
  set, with arq's timeout, and arq's ``run_job`` and ``finish_job`` follow;
- take (the engine's jobs): the same checks, then the job leaves Redis at
  once (queue entry, job key, retry key) and its bytes come back. An engine
  job only hands its work to the worker's pool (the database is the record,
  the outbox row stays until the work is claimed), so there is nothing for
  arq to track between the start and the finish: a worker that dies after
  a take leaves no key behind, and the relay copies the job like any job
  missing from Redis. An in-progress key still blocks the take, so a job a
  worker of an older release started is left to it.

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

#: KEYS: queue, job key, retry key, in-progress key. ARGV: job id, now ms.
#: Returns the job's bytes, or nil when it is not to be taken here. A queue
#: entry whose job key expired is dropped (arq's worker drops it too).
TAKE = """
if redis.call('exists', KEYS[4]) == 1 then return false end
local score = redis.call('zscore', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return false end
local job = redis.call('get', KEYS[2])
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('del', KEYS[2], KEYS[3])
return job
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
