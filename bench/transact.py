"""DBOS Transact's side of a case: the same N sequential no-op steps, as
``@DBOS.step()`` calls inside a ``@DBOS.workflow()``, on the same kind of
database, in DBOS's default configuration for that database.

DBOS keeps a process-wide singleton, so each case runs in a process of its
own (see bench.case) and launches and destroys DBOS exactly once.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from dbos import DBOS, DBOSConfig

from bench.databases import fresh_database
from bench.spec import Case, CaseResult, Stopwatch, Timing


@DBOS.step()
async def noop(i: int) -> int:
    return i


@DBOS.workflow()
async def steps(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


def _config(url: str) -> DBOSConfig:
    return DBOSConfig(
        name="repairbot-bench",
        system_database_url=url,
        # Quiet: DBOS logs each launch at INFO, which would bury the table.
        log_level="WARNING",
    )


async def timed_run(n: int) -> Timing:
    stopwatch = Stopwatch()
    # Called directly, a DBOS workflow runs inline in this process: DBOS's
    # in-process path, which the task compares our queued activities with.
    value = await steps(n)
    timing = stopwatch.stop()
    if value != n:
        raise RuntimeError(f"DBOS workflow returned {value!r}, expected {n}")
    return timing


async def run_case(case: Case) -> CaseResult:
    result = CaseResult(case)
    with fresh_database(case.db, admin_url=case.postgres_url) as url:
        DBOS(config=_config(url))
        try:
            DBOS.launch()
            await timed_run(case.warmup_n)
            for _ in range(case.repeat):
                result.record(await timed_run(case.n))
            result.notes = _notes()
        finally:
            # Before the database is dropped: DBOS holds pooled connections to it.
            DBOS.destroy()
    return result


def _notes() -> dict[str, Any]:
    return {"dbos_version": importlib.metadata.version("dbos")}


def run(case: Case) -> CaseResult:
    return asyncio.run(run_case(case))
