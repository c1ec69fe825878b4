"""Engine benchmark: a workflow of N sequential no-op activities on SQLite and
PostgreSQL, dispatched in-process and through arq, against DBOS Transact
running the same N-step workflow on the same kind of database, in the same run.

    python -m bench.engine [--n 10 100 1000] [--db sqlite postgres]
                           [--dispatch inprocess arq [arq-dispatched]]
                           [--repeat K] [--quick]

Every case runs in a child process of its own on a fresh database (see
bench.case); the table is Markdown, so it can go straight into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.environment import ROOT, load, machine, revision
from bench.spec import (
    ARQ,
    ARQ_DISPATCHED,
    DBOS,
    DISPATCHERS,
    INPROCESS,
    OURS,
    POSTGRES,
    RESULT_MARKER,
    SQLITE,
    Case,
    CaseResult,
)

DEFAULT_POSTGRES = os.environ.get(
    "BENCH_POSTGRES_URL",
    os.environ.get("TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
)
#: Its own Redis database: a case flushes it before starting.
DEFAULT_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
#: The targets of issue 12: at or below DBOS per step in-process and through
#: arq with eager workers; within 2x with every job through Redis.
TARGET_RATIO = {"inprocess": 1.0, "arq": 1.0, "arq-dispatched": 2.0}
#: Per-step time at the largest N over the smallest; at most this counts as linear.
LINEAR_GROWTH = 1.5
CASE_TIMEOUT = 1800.0


# -- the plan -------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--db", nargs="+", choices=[SQLITE, POSTGRES], default=[SQLITE, POSTGRES])
    parser.add_argument(
        "--dispatch",
        nargs="+",
        choices=DISPATCHERS,
        default=[INPROCESS, ARQ],
        help=f"{ARQ}: as app/main/worker_process.py wires it (eager follow-ups); "
        f"{ARQ_DISPATCHED}: every job through Redis",
    )
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per case (median)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: N=10,100 on SQLite only, one measured run each",
    )
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS baseline")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES,
        help="admin URL; each case creates and drops its own database",
    )
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS, help="a Redis database the benchmark may flush"
    )
    parser.add_argument(
        "--arq-poll-delay",
        type=float,
        default=None,
        help="override arq_workers' poll_delay (default: the runtime's own)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write all results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.db, args.repeat = [10, 100], [SQLITE], 1
    return args


def plan(args: argparse.Namespace) -> list[Case]:
    """DBOS first, then ours, per (db, N): neighbouring cases see the same load."""
    common = {
        "repeat": args.repeat,
        "postgres_url": args.postgres_url,
        "redis_url": args.redis_url,
        "arq_poll_delay": args.arq_poll_delay,
    }
    cases = []
    for db in args.db:
        for n in sorted(args.n):
            if not args.no_dbos:
                cases.append(Case(DBOS, db, INPROCESS, n, **common))
            cases.extend(Case(OURS, db, dispatch, n, **common) for dispatch in args.dispatch)
    return cases


# -- running --------------------------------------------------------------------


def run_in_child(case: Case) -> CaseResult:
    """One case, one process (DBOS is a process-wide singleton)."""
    command = [sys.executable, "-m", "bench.case", case.to_json()]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=CASE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return CaseResult(case, error=f"timed out after {CASE_TIMEOUT:.0f}s")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return CaseResult.from_json(line.removeprefix(RESULT_MARKER))
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return CaseResult(case, error=f"child exited {done.returncode} without a result: {tail}")


def run_all(cases: Iterable[Case]) -> list[CaseResult]:
    results = []
    for case in cases:
        print(f"  {case.label:<34}", end="", file=sys.stderr, flush=True)
        result = run_in_child(case)
        status = f"{result.per_step_ms:8.2f} ms/step" if result.ok else f"FAILED: {result.error}"
        print(status, file=sys.stderr, flush=True)
        results.append(result)
    return results


# -- the report -----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    db: str
    dispatch: str
    n: int
    ours: CaseResult
    dbos: CaseResult | None

    @property
    def ratio(self) -> float | None:
        if self.dbos is None or not (self.ours.ok and self.dbos.ok):
            return None
        return self.ours.per_step_ms / self.dbos.per_step_ms


def rows_of(results: list[CaseResult]) -> list[Row]:
    dbos = {(r.case.db, r.case.n): r for r in results if r.case.system == DBOS}
    rows = [
        Row(r.case.db, r.case.dispatch, r.case.n, r, dbos.get((r.case.db, r.case.n)))
        for r in results
        if r.case.system == OURS
    ]
    # Grouped by backend (in the order asked for) and dispatcher, so growth
    # reads down a column.
    db_order = list(dict.fromkeys(r.db for r in rows))
    return sorted(
        rows, key=lambda r: (db_order.index(r.db), r.dispatch != INPROCESS, r.dispatch, r.n)
    )


def growth(results: Iterable[CaseResult]) -> float | None:
    """Per-step time at the largest N over the smallest: 1.0 is linear total time."""
    ok = sorted((r for r in results if r.ok), key=lambda r: r.case.n)
    if len(ok) < 2 or ok[0].case.n == ok[-1].case.n:
        return None
    return ok[-1].per_step_ms / ok[0].per_step_ms


def _ms(result: CaseResult | None) -> str:
    if result is None:
        return "not run"
    if not result.ok:
        return f"n/a ({result.error})"
    per_step = [t / result.case.n * 1000 for t in result.totals]
    if len(per_step) == 1:
        return f"{result.per_step_ms:.2f}"
    return f"{result.per_step_ms:.2f} ({min(per_step):.2f}-{max(per_step):.2f})"


def _cpu(row: Row) -> str:
    ours = row.ours.cpu_per_step_ms if row.ours.ok else None
    dbos = row.dbos.cpu_per_step_ms if row.dbos is not None and row.dbos.ok else None
    return f"{_num(ours)} / {_num(dbos)}"


def _num(value: float | None, fmt: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{suffix}"


def table(results: list[CaseResult]) -> str:
    rows = rows_of(results)
    lines = [
        "| backend | dispatch | N | total s | per-step ms (min-max) | DBOS per-step ms "
        "| ours/DBOS | growth | client CPU ms/step ours / DBOS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        group = [r.ours for r in rows if (r.db, r.dispatch) == (row.db, row.dispatch)]
        last = row.n == max(r.case.n for r in group)
        lines.append(
            f"| {row.db} | {row.dispatch} | {row.n} "
            f"| {_num(row.ours.total, '.3f') if row.ours.ok else 'n/a'} "
            f"| {_ms(row.ours)} | {_ms(row.dbos)} | {_num(row.ratio, '.2f', 'x')} "
            f"| {_num(growth(group)) if last else ''} | {_cpu(row)} |"
        )
    return "\n".join(lines)


def dbos_growth_lines(results: list[CaseResult]) -> list[str]:
    lines = []
    for db in dict.fromkeys(r.case.db for r in results if r.case.system == DBOS):
        group = [r for r in results if r.case.system == DBOS and r.case.db == db]
        lines.append(f"DBOS growth on {db}: {_num(growth(group))}")
    return lines


def verdicts(results: list[CaseResult]) -> list[str]:
    """Per backend and dispatcher: is the target met at every N, is growth linear?"""
    rows = rows_of(results)
    lines = []
    for db, dispatch in dict.fromkeys((r.db, r.dispatch) for r in rows):
        group = [r for r in rows if (r.db, r.dispatch) == (db, dispatch)]
        ratios = [r.ratio for r in group]
        g = growth(r.ours for r in group)
        if any(x is None for x in ratios):
            ratio_text = "ratio unavailable for some N (a case failed or DBOS did not run)"
        else:
            worst = max(x for x in ratios if x is not None)
            target = TARGET_RATIO[dispatch]
            met = "MET" if worst <= target else "NOT MET"
            ratio_text = f"worst ours/DBOS {worst:.2f}x -> {target}x target {met}"
        linear = "n/a" if g is None else ("linear" if g <= LINEAR_GROWTH else "super-linear")
        lines.append(f"{db}/{dispatch}: {ratio_text}; growth {_num(g)} ({linear})")
    return lines


def revision_warnings(results: list[CaseResult], expected: str) -> list[str]:
    """Cases that ran other code than the run started with (someone committed)."""
    moved = [
        f"{r.case.label} ran at {r.notes['revision']}"
        for r in results
        if r.notes.get("revision", expected) != expected
    ]
    if not moved:
        return []
    return [f"WARNING: the code changed during the run (started at {expected}):", *moved]


def report(results: list[CaseResult], argv: Sequence[str], started: dict[str, str]) -> str:
    command = shlex.join(["python", "-m", "bench.engine", *argv])
    parts = [
        f"command: {command}",
        f"revision: {started['revision']}",
        f"machine: {machine()}",
        f"load average at start / end: {started['load']} / {load()}",
        "",
        table(results),
        "",
        *dbos_growth_lines(results),
        *verdicts(results),
        *revision_warnings(results, started["revision"]),
    ]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    # Read before the cases run: other engineers may commit while they do.
    context = {"load": load(), "revision": revision()}
    started = time.monotonic()
    cases = plan(args)
    print(f"running {len(cases)} cases, each in its own process:", file=sys.stderr)
    results = run_all(cases)
    print(report(results, argv, context))
    print(f"\n({time.monotonic() - started:.0f}s in all)")
    if args.json is not None:
        args.json.write_text(json.dumps([json.loads(r.to_json()) for r in results], indent=2))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
