"""Where the time of one step goes: ``python -m bench.profile [--n 1000] [--db sqlite]``.

Three looks at the same workflow of N no-op activities (in-process unless
``--dispatch`` says otherwise), each on a run of its own after a warm-up:

1. plain: wall and CPU per step, nothing attached;
2. census: every transaction and statement, attributed to the store method
   that issued it (SQLAlchemy events), and the same census of DBOS's steps;
3. cProfile: inclusive time of the runtime's parts and exclusive time per
   library, per step. cProfile inflates Python-heavy code, so read its
   figures as shares, and the plain run as the truth.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import Engine, event

from bench.databases import fresh_database
from bench.engine import DEFAULT_POSTGRES, DEFAULT_REDIS
from bench.environment import ROOT
from bench.spec import DISPATCHERS, INPROCESS, OURS, POSTGRES, SQLITE, Case

# A prefix, so it matches the store as one module or as a package of mixins.
STORE = "app/engine/_store"
DBOS_FILES = ("dbos/_sys_db", "dbos/_core")
# The table a statement touches, skipping a schema prefix ("main"., "dbos".).
_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+(?:"?[a-z_]+"?\.)?"?([a-z_]+)', re.IGNORECASE)

#: The runtime's parts, by (file suffix, function): inclusive time of each.
PARTS: list[tuple[str, str, str]] = [
    ("claim activity (1 write tx)", STORE, "claim_activity"),
    ("complete activity (1 write tx)", STORE, "complete_activity"),
    ("commit workflow task (1 write tx)", STORE, "commit_workflow_task"),
    ("completion + workflow task + next claim, fused (1 write tx)", STORE, "complete_and_continue"),
    ("read run row (load_run)", STORE, "load_run"),
    ("read run row and new events (load_task)", STORE, "load_task"),
    ("read new events (load_events)", STORE, "load_events"),
    ("replay: apply new events", "app/engine/_replay.py", "apply"),
    ("dispatch: enqueue jobs", "app/engine/_dispatch.py", "enqueue"),
    ("reconciler passes", "app/engine/_reconciler.py", "run_once"),
]
#: The store calls that commit a workflow task (one per step).
STEP_COMMITS = ("commit_workflow_task", "complete_and_continue")
#: Exclusive time per library: which code is actually on the CPU.
LIBRARIES: list[tuple[str, str]] = [
    ("SQLAlchemy (statement build, compile cache, result rows)", "sqlalchemy/"),
    ("DB driver (sqlite3 / psycopg)", "<driver>"),
    ("runtime code (app/engine)", "app/engine/"),
    ("asyncio event loop", "asyncio/"),
    ("json", "json/"),
    ("arq / redis", "arq/"),
]


# -- census ---------------------------------------------------------------------


@dataclass
class Census:
    """Transactions and statements, keyed by the code that issued them,
    counted only while ``counting`` is on."""

    transactions: Counter[str] = field(default_factory=Counter)
    statements: Counter[str] = field(default_factory=Counter)
    checkouts: int = 0
    #: Transactions in autocommit (one statement each: no BEGIN, no COMMIT).
    autocommits: int = 0
    active: bool = False

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def lines(self, n: int, *, postgres: bool = False) -> list[str]:
        out = [f"  pool checkouts: {self.checkouts / n:.2f} per step"]
        if postgres:
            # psycopg sends BEGIN and COMMIT/ROLLBACK itself (no cursor event),
            # except in autocommit, and pool_pre_ping adds a ping per
            # checkout: count them in.
            explicit = sum(self.transactions.values()) - self.autocommits
            trips = sum(self.statements.values()) + 2 * explicit
            out.append(
                f"  round trips: ~{trips / n:.1f} per step without pings, "
                f"~{(trips + self.checkouts) / n:.1f} if every checkout pings"
            )
        out.append(
            f"  transactions: {sum(self.transactions.values()) / n:.2f} per step"
            f" ({self.autocommits / n:.2f} of them one statement in autocommit)"
        )
        for caller, count in self.transactions.most_common():
            out.append(f"    {count / n:6.2f}  {caller}")
        out.append(f"  statements: {sum(self.statements.values()) / n:.2f} per step")
        for key, count in self.statements.most_common():
            out.append(f"    {count / n:6.2f}  {key}")
        return out


def _caller(files: tuple[str, ...]) -> str:
    """The outermost frame in ``files``: the public operation, not its helpers."""
    frame: FrameType | None = sys._getframe(2)
    found = "other (reconciler, start, checks)"
    while frame is not None:
        if any(f in frame.f_code.co_filename for f in files):
            found = frame.f_code.co_name
        frame = frame.f_back
    return found


def _statement_key(sql: str, caller: str) -> str:
    words = sql.split(None, 1)
    verb = words[0].upper() if words else "?"
    table = _TABLE.search(sql)
    return f"{caller}: {verb} {table.group(1) if table else ''}".rstrip()


def install_census(engine: Engine, files: tuple[str, ...]) -> Census:
    """Listen on ``engine`` for good. Installed before any other thread uses
    the engine, and never removed: SQLAlchemy's listener lists must not
    change while another thread (the liveness beat) walks them."""
    census = Census()

    def on_begin(conn: Any) -> None:
        if census.active:
            census.transactions[_caller(files)] += 1
            if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
                census.autocommits += 1

    def on_statement(_conn: Any, _cur: Any, sql: str, *_rest: Any) -> None:
        if census.active:
            census.statements[_statement_key(sql, _caller(files))] += 1

    def on_checkout(*_args: Any) -> None:
        if census.active:
            census.checkouts += 1

    listeners: list[tuple[Any, str, Callable[..., None]]] = [
        (engine, "begin", on_begin),
        (engine, "before_cursor_execute", on_statement),
        (engine.pool, "checkout", on_checkout),
    ]
    for target, name, fn in listeners:
        event.listen(target, name, fn)
    return census


# -- growth within one run -----------------------------------------------------


@contextmanager
def step_clock(store: Any) -> Iterator[list[tuple[float, float]]]:
    """Wall and process CPU time at every workflow-task commit: one stamp per step.

    Both, because on a shared machine wall time per step swings with the
    neighbours' load, while CPU time misses the database server's share.
    """
    stamps: list[tuple[float, float]] = []
    originals = {name: getattr(store, name) for name in STEP_COMMITS}

    def stamped(original: Any) -> Any:
        def commit(*args: Any, **kwargs: Any) -> Any:
            stamps.append((time.perf_counter(), time.process_time()))
            return original(*args, **kwargs)

        return commit

    for name, original in originals.items():
        setattr(store, name, stamped(original))
    try:
        yield stamps
    finally:
        for name, original in originals.items():
            setattr(store, name, original)


def tenth_lines(stamps: list[tuple[float, float]]) -> list[str]:
    size = (len(stamps) - 1) // 10
    if size < 1:
        return ["  (too few steps)"]

    def per_step(k: int, clock: int) -> float:
        return (stamps[(k + 1) * size][clock] - stamps[k * size][clock]) / size * 1000

    out = [
        f"  steps {k * size:>5}-{(k + 1) * size:<5} {per_step(k, 0):6.2f} ms wall/step  "
        f"{per_step(k, 1):6.2f} ms CPU/step"
        for k in range(10)
    ]
    out.append(
        f"  last tenth / first tenth: wall {per_step(9, 0) / per_step(0, 0):.2f}, "
        f"CPU {per_step(9, 1) / per_step(0, 1):.2f} (1.0 = every step costs the same)"
    )
    return out


# -- cProfile -------------------------------------------------------------------


def _matches(key: tuple[str, int, str], file: str, function: str) -> bool:
    return file in key[0] and key[2] == function


def part_lines(stats: pstats.Stats, n: int) -> list[str]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    out = []
    for label, file, function in PARTS:
        cum = sum(v[3] for k, v in raw.items() if _matches(k, file, function))
        calls = sum(v[1] for k, v in raw.items() if _matches(k, file, function))
        out.append(f"  {cum / n * 1000:7.2f} ms/step  {calls / n:5.2f} calls/step  {label}")
    return out


def _library(filename: str, function: str) -> str:
    if filename == "~" and ("sqlite3" in function or "psycopg" in function):
        return "<driver>"
    if "psycopg" in filename:
        return "<driver>"
    for _label, marker in LIBRARIES:
        if marker in filename:
            return marker
    return "other"


def library_lines(stats: pstats.Stats, n: int) -> list[str]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    by_library: Counter[str] = Counter()
    for (filename, _line, function), value in raw.items():
        by_library[_library(filename, function)] += value[2]
    total = sum(by_library.values())
    labels = dict((marker, label) for label, marker in LIBRARIES) | {"other": "other"}
    return [
        f"  {t / n * 1000:7.2f} ms/step  {t / total:5.1%}  {labels[marker]}"
        for marker, t in by_library.most_common()
    ]


def top_lines(stats: pstats.Stats, n: int, count: int = 12) -> list[str]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    ranked = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:count]
    return [
        f"  {v[2] / n * 1000:7.3f} ms/step  {v[1] / n:6.1f} calls/step  "
        f"{_short(k[0])}:{k[1]}({k[2]})"
        for k, v in ranked
    ]


def _short(filename: str) -> str:
    for marker in ("site-packages/", f"{ROOT}/", "python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# -- the runs -------------------------------------------------------------------


@asynccontextmanager
async def _runtime(case: Case) -> AsyncIterator[Any]:
    from app.engine._db import make_engine
    from app.operations.migrate import upgrade
    from bench import ours

    with fresh_database(case.db, admin_url=case.postgres_url) as url:
        upgrade(url)
        engine = make_engine(url)
        census = install_census(engine, (STORE,))
        try:
            async with ours.started_runtime(case, engine) as runtime:
                watch = ours.CompletionWatch(runtime.store)
                await ours.timed_run(runtime, watch, "warmup", case.warmup_n)
                yield runtime, watch, census
        finally:
            engine.dispose()


async def profile_ours(case: Case, out: Path | None) -> list[str]:
    from bench import ours

    lines = [f"## ours: {case.db}, {case.dispatch}, N={case.n}"]
    async with _runtime(case) as (runtime, watch, census):
        with step_clock(runtime.store) as stamps:
            plain = await ours.timed_run(runtime, watch, "plain", case.n)
        lines.append(
            f"plain run: {plain.wall / case.n * 1000:.2f} ms/step wall, "
            f"{plain.cpu / case.n * 1000:.2f} ms/step CPU"
        )
        lines += ["cost per step through the run, by tenth:", *tenth_lines(stamps)]
        with census.counting():
            await ours.timed_run(runtime, watch, "census", case.n)
        lines += ["census (per step):", *census.lines(case.n, postgres=case.db == POSTGRES)]
        profiler = cProfile.Profile()
        profiler.enable()
        profiled = await ours.timed_run(runtime, watch, "profiled", case.n)
        profiler.disable()
    stats = pstats.Stats(profiler)
    if out is not None:
        stats.dump_stats(out)
    lines.append(f"cProfile run: {profiled.wall / case.n * 1000:.2f} ms/step wall (inflated)")
    lines += ["inclusive time of the runtime's parts:", *part_lines(stats, case.n)]
    lines += ["exclusive time by library:", *library_lines(stats, case.n)]
    lines += ["top functions by exclusive time:", *top_lines(stats, case.n)]
    return lines


async def census_dbos(case: Case) -> list[str]:
    from dbos import DBOS

    from bench import transact

    lines = [f"## DBOS: {case.db}, N={case.n}"]
    with fresh_database(case.db, admin_url=case.postgres_url) as url:
        DBOS(config=transact._config(url))
        try:
            DBOS.launch()
            census = install_census(_dbos_engine(), DBOS_FILES)
            await transact.timed_run(case.warmup_n)
            plain = await transact.timed_run(case.n)
            lines.append(
                f"plain run: {plain.wall / case.n * 1000:.2f} ms/step wall, "
                f"{plain.cpu / case.n * 1000:.2f} ms/step CPU"
            )
            with census.counting():
                await transact.timed_run(case.n)
            lines += ["census (per step):", *census.lines(case.n, postgres=case.db == POSTGRES)]
        finally:
            DBOS.destroy()
    return lines


def _dbos_engine() -> Engine:
    # DBOS exposes no public handle on its system database engine.
    from dbos import _dbos

    instance = _dbos._dbos_global_instance
    assert instance is not None
    engine: Engine = instance._sys_db.engine
    return engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--db", choices=[SQLITE, POSTGRES], default=SQLITE)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES)
    parser.add_argument(
        "--dispatch",
        choices=DISPATCHERS,
        default=INPROCESS,
        help="as bench.engine's (arq and arq-dispatched need --redis-url)",
    )
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS, help="a Redis database the benchmark may flush"
    )
    parser.add_argument("--pstats", type=Path, default=None, help="dump raw cProfile stats here")
    parser.add_argument("--no-dbos", action="store_true")
    args = parser.parse_args(argv)
    case = Case(
        OURS,
        args.db,
        args.dispatch,
        args.n,
        postgres_url=args.postgres_url,
        redis_url=args.redis_url,
    )
    lines = asyncio.run(profile_ours(case, args.pstats))
    if not args.no_dbos:
        lines += ["", *asyncio.run(census_dbos(case))]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
