"""Load benchmark: N repair runs started together on an emulated GitHub, one
``repairbot web`` process and W ``repairbot worker`` processes (each with a
data directory of its own), PostgreSQL and Redis (arq).

    python -m bench.load [--runs 100] [--workers 3] [--concurrency 8]
                         [--timeout 1200] [--json results.json] [--census]
                         [--profile DIR] [--idle SECONDS] [--warmup RUNS]

Every run has a repository of its own (a copy of the demo project with its
bug), so runs are independent: each must end merged with exactly one pull
request and one status comment, and its branch deleted after the merge, as
read from the emulator. A
maintainer approves each draft pull request as soon as it is open.

Reported:

- runs per minute, from the first label to the last run's end;
- bot overhead from label to draft PR at p50 and p95: the time from the
  label (taken just before the label request) to the end of the pull-request
  step, minus the time spent in the agent (``agent.propose_fix``) and in
  repository commands (``commands.*``), both read from the activity attempts'
  recorded start and end (the union of their intervals, so nothing is
  subtracted twice). Also shown: that overhead without workspace building
  (git clones), and the runtime's own gaps (no activity running at all);
- peak RSS of each process (the kernel's VmHWM) and database connections in
  use (``pg_stat_activity``, sampled; by process through ``application_name``);
- lost runs (not ended merged in time) and duplicates (more than one run,
  branch, pull request or status comment per issue).

Not a test: nothing here asserts a speed. tests/bench/test_load_smoke.py runs
it with tiny numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import Engine, func, select, text

from app.config import Settings
from app.contracts.ids import repair_workflow_id
from app.demo.fleet import Fleet, wait_healthy
from app.demo.project import ISSUE_BODY, ISSUE_TITLE, fix_agent_command, write_project
from app.demo.stack import LocalStack
from app.engine._db import make_engine
from app.engine._runtime import SETTLED, Runtime
from app.engine._tables import ActivityAttempt, ActivityTask, HistoryEvent, WorkflowRun
from app.main.catalog import build_registry
from app.operations.migrate import upgrade
from bench import load_profile
from bench.census import cpu_seconds, cpu_with_children
from bench.databases import fresh_database
from bench.environment import load, machine, revision
from bench.spec import POSTGRES

tasks = ActivityTask.__table__  # type: ignore[attr-defined]
history = HistoryEvent.__table__  # type: ignore[attr-defined]
attempts = ActivityAttempt.__table__  # type: ignore[attr-defined]
runs_table = WorkflowRun.__table__  # type: ignore[attr-defined]


def product_default(name: str) -> float:
    """A setting's product default (what ``repairbot worker`` runs with unset)."""
    default = Settings.__dataclass_fields__[name].default
    assert isinstance(default, float)
    return default


#: Put first on the ``PYTHONPATH`` of repairbot's processes by ``--census``.
CENSUS_HOOK = Path(__file__).resolve().parent / "load_census"

#: Time excluded from the bot's overhead: the agent and repository commands.
EXCLUDED = ("agent.propose_fix", "commands.")
#: Also excluded for the "without git" figure: building workspaces (clones).
GIT_WORK = ("workspace.",)


@dataclass
class RunFigures:
    repo: str
    status: str
    label_at: float
    pr_at: float | None = None
    closed_at: float | None = None
    label_to_pr: float | None = None
    overhead: float | None = None
    overhead_without_git: float | None = None
    runtime_gaps: float | None = None
    #: From the label to the run's creation (webhook delivery and intake).
    label_to_start: float | None = None
    #: Seconds per activity attempt before the PR, by activity name (summed).
    activity_seconds: dict[str, float] = field(default_factory=dict)
    #: The run's outcome and its reason (from the workflow's result or error).
    outcome: str = ""
    detail: str = ""
    runs_for_issue: int = 0
    branches: int = 0
    pulls: int = 0
    merged_pulls: int = 0
    status_comments: int = 0

    @property
    def merged(self) -> bool:
        return self.status == "completed" and self.outcome == "merged"

    @property
    def exact(self) -> bool:
        return (
            self.status == "completed"
            and self.runs_for_issue == 1
            # The run's one branch is deleted once its pull request merged.
            and self.branches == 0
            and self.pulls == 1
            and self.merged_pulls == 1
            and self.status_comments == 1
        )


@dataclass
class LoadResult:
    runs: int
    workers: int
    concurrency: int
    revision: str
    machine: str
    load_before: str
    load_after: str = ""
    #: Whole runs before the measured ones (``--warmup``), in no figure.
    warmup: int = 0
    elapsed: float = 0.0
    runs_per_minute: float = 0.0
    completed: int = 0
    exact: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    overhead_p50: float | None = None
    overhead_p95: float | None = None
    overhead_without_git_p50: float | None = None
    overhead_without_git_p95: float | None = None
    gaps_p50: float | None = None
    gaps_p95: float | None = None
    label_to_start_p50: float | None = None
    label_to_start_p95: float | None = None
    #: Mean seconds per run spent in each activity before the PR.
    activity_seconds: dict[str, float] = field(default_factory=dict)
    label_to_pr_p50: float | None = None
    label_to_pr_p95: float | None = None
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    #: How many runs ended with each outcome.
    outcomes: dict[str, int] = field(default_factory=dict)
    #: CPU seconds per process from the labels to the end: (own, reaped children).
    cpu_seconds: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: CPU seconds of this process (the pollers, the approvals) meanwhile.
    bench_cpu_seconds: float = 0.0
    #: CPU seconds of the emulated GitHub's process and its reaped children
    #: (git: its smart HTTP and the plumbing behind its REST API) meanwhile:
    #: (own, children).
    emulator_cpu_seconds: tuple[float, float] = (0.0, 0.0)
    #: CPU seconds of PostgreSQL's processes meanwhile (at least: a backend
    #: that ended before the last sample is not counted).
    postgres_cpu_seconds: float = 0.0
    #: With ``--idle``: CPU seconds per second of each process with nothing to do
    #: (before the labels), over ``idle_seconds``.
    idle_cpu: dict[str, float] = field(default_factory=dict)
    idle_seconds: float = 0.0
    restarts: dict[str, int] = field(default_factory=dict)
    peak_connections: int = 0
    peak_connections_by_process: dict[str, int] = field(default_factory=dict)
    per_run: list[dict[str, Any]] = field(default_factory=list)
    #: With ``--census``: what happened per run, by process kind (web, workers)
    #: and from the database (activities and workflows by name).
    census: dict[str, dict[str, float]] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to [lo, hi]."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, end = 0.0, lo
    for start, stop in clipped:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def attempt_intervals(engine: Engine, run_id: str) -> list[tuple[str, float, float]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(tasks.c.activity, attempts.c.started_at, attempts.c.finished_at)
            .join(attempts, attempts.c.task_id == tasks.c.id)
            .where(tasks.c.run_id == run_id, attempts.c.finished_at.is_not(None))
        ).all()
    return [(r.activity, float(r.started_at), float(r.finished_at)) for r in rows]


def pr_done_at(engine: Engine, run_id: str) -> float | None:
    """When the run's draft pull request step ended (its first completed attempt)."""
    with engine.connect() as conn:
        return conn.execute(
            select(func.min(attempts.c.finished_at))
            .join(tasks, attempts.c.task_id == tasks.c.id)
            .where(
                tasks.c.run_id == run_id,
                tasks.c.activity == "github.pull_request",
                attempts.c.outcome == "completed",
            )
        ).scalar()


def figures_for(engine: Engine, fig: RunFigures, run_id: str) -> None:
    pr_at = pr_done_at(engine, run_id)
    if pr_at is None:
        return
    fig.pr_at = pr_at
    fig.label_to_pr = pr_at - fig.label_at
    spans = attempt_intervals(engine, run_id)

    def busy(prefixes: tuple[str, ...]) -> float:
        chosen = [(a, b) for name, a, b in spans if name.startswith(prefixes)]
        return union_length(chosen, fig.label_at, pr_at)

    fig.overhead = fig.label_to_pr - busy(EXCLUDED)
    fig.overhead_without_git = fig.label_to_pr - busy(EXCLUDED + GIT_WORK)
    fig.runtime_gaps = fig.label_to_pr - busy(("",))
    for name, a, b in spans:
        if a < pr_at:
            fig.activity_seconds[name] = fig.activity_seconds.get(name, 0.0) + (min(b, pr_at) - a)


class Sampler:
    """Peak database connections (total and by process) and peak RSS."""

    def __init__(self, engine: Engine, database: str, fleet: Fleet) -> None:
        self.engine = engine
        self.database = database
        self.fleet = fleet
        self.peak = 0
        self.by_process: dict[str, int] = {}

    def sample(self) -> None:
        self.fleet.sample_usage()
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "select application_name, count(*) from pg_stat_activity "
                    "where datname = :db and pid <> pg_backend_pid() group by 1"
                ),
                {"db": self.database},
            ).all()
        self.peak = max(self.peak, sum(int(n) for _, n in rows))
        for name, n in rows:
            key = name or "(unnamed)"
            self.by_process[key] = max(self.by_process.get(key, 0), int(n))


async def github_counts(stack: LocalStack, repo: str, number: int, fig: RunFigures) -> None:
    owner, who = stack.people.owner, stack.people.owner
    pulls = await stack.gh.rest("GET", f"/repos/{owner}/{repo}/pulls?state=all", as_user=who)
    comments = await stack.gh.rest(
        "GET", f"/repos/{owner}/{repo}/issues/{number}/comments", as_user=who
    )
    fig.pulls = len(pulls)
    fig.merged_pulls = sum(1 for p in pulls if p.get("merged_at"))
    fig.branches = len(await stack.run_branches(repo))
    fig.status_comments = sum(
        1 for c in comments if "repairbot:op=" in c["body"] and "status" in c["body"]
    )


def outcome_of(result: Any, error: Any) -> tuple[str, str]:
    """The repair's outcome and the reason it gives, or the run's error."""
    if isinstance(result, dict):
        return str(result.get("outcome") or ""), str(result.get("detail") or "")[:300]
    if error:
        return "error", str(error)[:300]
    return "", ""


def with_app_name(url: str, name: str) -> str:
    return url + ("&" if "?" in url else "?") + f"application_name={name}"


async def run_load(args: argparse.Namespace, database_url: str, root: Path) -> LoadResult:
    result = LoadResult(
        runs=args.runs,
        workers=args.workers,
        concurrency=args.concurrency,
        warmup=args.warmup,
        revision=revision(),
        machine=machine(),
        load_before=load(),
    )
    redis = Redis.from_url(args.redis)
    await redis.flushdb()
    await redis.aclose()
    upgrade(database_url)
    project = write_project(root / "project")
    # The emulated GitHub gets a process of its own, as GitHub has machines of
    # its own: in this process it would compete for the GIL with the pollers.
    stack = LocalStack(root=root / "stack", emulator_process=True)
    settings = await stack.start_github(project, database_url=database_url)
    names = [stack.repo_name] + [f"{stack.repo_name}-{i}" for i in range(2, args.runs + 1)]
    warm_names = [f"{stack.repo_name}-warm-{i}" for i in range(1, args.warmup + 1)]
    for name in names[1:] + warm_names:
        await stack.add_repo(name, project)
    settings = settings.with_overrides(
        redis_url=args.redis,
        agent_command=tuple(fix_agent_command()),
        concurrency=args.concurrency,
        # The product's reconciler interval and relay grace (app/config.py),
        # not the demo stack's short ones: the reconciler's passes are a cost
        # per second per worker, part of what a run costs.
        relay_grace=product_default("relay_grace"),
        reconcile_interval=product_default("reconcile_interval"),
        # Every repository is in the one installation: the benchmark measures
        # the machinery, not the per-installation cap (which would queue them).
        max_active_runs_per_installation=0,
    )
    census = root / "census" if args.census else None
    census_env: dict[str, str] = {}
    if census is not None:
        census.mkdir(parents=True)
        # For the fleet's processes only (bench/load_census/), never this
        # process's environment: a caller in the same process (a test) would
        # pass the hook on to processes of its own.
        census_env["REPAIRBOT_LOAD_CENSUS"] = str(census)
        census_env["PYTHONPATH"] = os.pathsep.join(
            [str(CENSUS_HOOK), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    fleet = Fleet(root / "machines", settings, extra_env=census_env)
    fleet.root.mkdir(parents=True)
    app_url = stack.app_url
    web = fleet.web(stack.hand_app_port_over())
    web.settings = web.settings.with_overrides(database_url=with_app_name(database_url, "web"))
    web.start()
    for i in range(1, args.workers + 1):
        name = f"worker-{i}"
        fleet.worker(name, database_url=with_app_name(database_url, name)).start()
    engine = make_engine(database_url, pool_size=2)
    reader = Runtime(engine, build_registry())
    database = engine.url.database or ""
    sampler = Sampler(engine, database, fleet)
    figs: dict[str, RunFigures] = {}
    spies: list[subprocess.Popen[bytes]] = []
    try:
        # Generous: on a loaded machine a cold start of the web process is slow.
        wait_healthy(f"{app_url}/healthz", web, timeout=300)
        print(f"  web up; {len(names)} repositories ready; labelling", file=sys.stderr)
        numbers = await open_issues(stack, names + warm_names)
        driver = Driver(stack, engine, reader, sampler, fleet, numbers, args.timeout)
        if warm_names:
            await driver.warm_up(warm_names)
        if args.idle:
            idle_spies: list[subprocess.Popen[bytes]] = []
            if args.profile is not None:
                idle_spies = load_profile.start(
                    {m.name: m.pid for m in fleet.machines}, args.profile / "idle"
                )
            result.idle_cpu, result.idle_seconds = await idle_cpu(fleet, args.idle)
            load_profile.stop(idle_spies)
        sampler.sample()
        if census is not None:
            (census / "START").touch()
            await asyncio.sleep(0.3)  # each process keeps its counts so far (it looks every 50 ms)
        if args.profile is not None:
            workers = {m.name: m.pid for m in fleet.machines if m.name.startswith("worker")}
            spies = load_profile.start(workers, args.profile)
        cpu_at_start = {m.name: (m.cpu_seconds, m.children_cpu_seconds) for m in fleet.machines}
        emulator_at_start = process_cpu(stack.emulator_pid)
        postgres_at_start = postgres_cpu()
        bench_cpu_at_start = time.process_time()
        started = time.time()
        ids = await driver.drive(names, figs)
        sampler.sample()
        load_profile.stop(spies)
        result.bench_cpu_seconds = time.process_time() - bench_cpu_at_start
        postgres_now = postgres_cpu()
        result.postgres_cpu_seconds = sum(
            cpu - postgres_at_start.get(pid, 0.0) for pid, cpu in postgres_now.items()
        )
        emulator_now = process_cpu(stack.emulator_pid)
        result.emulator_cpu_seconds = (
            emulator_now[0] - emulator_at_start[0],
            emulator_now[1] - emulator_at_start[1],
        )
        result.cpu_seconds = {
            m.name: (
                round(m.cpu_seconds - cpu_at_start[m.name][0], 1),
                round(m.children_cpu_seconds - cpu_at_start[m.name][1], 1),
            )
            for m in fleet.machines
        }
        await stack.gh.deliveries.wait()
        ended = []
        for name, wid in ids.items():
            fig = figs[name]
            with engine.connect() as conn:
                found = conn.execute(
                    select(
                        runs_table.c.run_id,
                        runs_table.c.status,
                        runs_table.c.closed_at,
                        runs_table.c.created_at,
                        runs_table.c.result,
                        runs_table.c.error,
                    )
                    .where(runs_table.c.workflow_id == wid)
                    .order_by(runs_table.c.created_at)
                ).all()
            fig.runs_for_issue = len(found)
            if found:
                fig.status = found[-1].status
                fig.closed_at = found[-1].closed_at
                fig.outcome, fig.detail = outcome_of(found[-1].result, found[-1].error)
                fig.label_to_start = found[0].created_at - fig.label_at
                figures_for(engine, fig, found[-1].run_id)
            await github_counts(stack, name, numbers[name], fig)
            if fig.closed_at is not None:
                ended.append(fig.closed_at)
        last_end = max(ended) if ended else time.time()
        result.elapsed = last_end - started
        result.completed = sum(1 for f in figs.values() if f.merged)
        result.exact = sum(1 for f in figs.values() if f.exact)
        result.runs_per_minute = result.completed / (result.elapsed / 60) if ended else 0.0
        result.lost = [f.repo for f in figs.values() if not f.merged]
        result.duplicated = [
            f.repo
            for f in figs.values()
            if max(f.runs_for_issue, f.branches, f.pulls, f.status_comments) > 1
        ]
        summarize(result, list(figs.values()))
        for fig in figs.values():
            key = fig.outcome or fig.status
            result.outcomes[key] = result.outcomes.get(key, 0) + 1
    finally:
        load_profile.stop(spies)
        if census is not None:
            flush_census(census, fleet)
        fleet.stop()
        if census is not None:
            result.census = census_per_run(census, engine, args.runs, args.runs + args.warmup)
        result.peak_rss_mib = {m.name: round(m.peak_rss_kib / 1024, 1) for m in fleet.machines}
        result.restarts = {m.name: m.restarts for m in fleet.machines if m.restarts}
        result.peak_connections = sampler.peak
        result.peak_connections_by_process = dict(sampler.by_process)
        result.load_after = load()
        result.per_run = [asdict(f) for f in figs.values()]
        engine.dispose()
        await stack.stop()
    return result


def process_cpu(pid: int | None) -> tuple[float, float]:
    """CPU seconds process ``pid`` used so far: its own, and its reaped children's."""
    return (0.0, 0.0) if pid is None else cpu_with_children(pid)


def postgres_cpu() -> dict[int, float]:
    """CPU seconds so far of each process of this machine's PostgreSQL
    (the server and its backends, whoever started it), by pid."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            found[int(entry.name)] = cpu_seconds(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


async def idle_cpu(fleet: Fleet, seconds: float) -> tuple[dict[str, float], float]:
    """Each process's CPU seconds per second while nothing is asked of it: the
    reconciler's passes, liveness beats, the consumers' polls (a cost per
    second, which a run pays as a share of the time it takes)."""
    for m in fleet.machines:
        m.sample_usage()
    before = {m.name: m.cpu_seconds + m.children_cpu_seconds for m in fleet.machines}
    started = time.monotonic()
    await asyncio.sleep(seconds)
    took = time.monotonic() - started
    for m in fleet.machines:
        m.sample_usage()
    return {
        m.name: round((m.cpu_seconds + m.children_cpu_seconds - before[m.name]) / took, 4)
        for m in fleet.machines
    }, took


def flush_census(directory: Path, fleet: Fleet, timeout: float = 10.0) -> None:
    """Have every running process of the fleet write its counts now (its
    ``atexit`` write may not happen if stopping it takes a kill)."""
    flush = directory / "FLUSH"
    flush.touch()
    asked = flush.stat().st_mtime
    pids = [m.pid for m in fleet.machines if m.alive()]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = [directory / f"{pid}.json" for pid in pids]
        if all(p.exists() and p.stat().st_mtime >= asked for p in written):
            return
        time.sleep(0.05)


async def open_issues(stack: LocalStack, names: Sequence[str]) -> dict[str, int]:
    """The benchmark's issue in each repository, by repository: its number."""
    people, numbers = stack.people, {}
    for name in names:
        issue = await stack.gh.create_issue(
            people.owner, name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
        )
        numbers[name] = int(issue["number"])
    return numbers


@dataclass
class Driver:
    """What drives a batch of runs: it labels their issues, approves their
    draft pull requests and waits for them to end."""

    stack: LocalStack
    engine: Engine
    reader: Runtime
    sampler: Sampler
    fleet: Fleet
    #: The benchmark's issue in each repository, by repository.
    numbers: dict[str, int]
    timeout: float

    async def warm_up(self, names: Sequence[str]) -> None:
        """``--warmup``: whole runs before the measured ones, left out of every
        figure, so each process has done its once-only work first (imports,
        connections, compiled statements): the figures are then a long-running
        fleet's. An error if one does not end merged."""
        print(f"  warming up with {len(names)} runs", file=sys.stderr)
        figs: dict[str, RunFigures] = {}
        ids = await self.drive(names, figs)
        with self.engine.connect() as conn:
            statuses = dict(
                conn.execute(
                    select(runs_table.c.workflow_id, runs_table.c.status).where(
                        runs_table.c.workflow_id.in_(list(ids.values()))
                    )
                ).all()
            )
        unfinished = [name for name, wid in ids.items() if statuses.get(wid) != "completed"]
        if unfinished:
            raise SystemExit(f"--warmup: runs did not end: {', '.join(unfinished)}")

    async def drive(self, names: Sequence[str], figs: dict[str, RunFigures]) -> dict[str, str]:
        """Label every issue of ``names`` at once and approve each draft pull
        request as soon as it is open, until every run ended (or ``timeout``);
        the workflow id of each repository's run."""
        stack, reader, fleet = self.stack, self.reader, self.fleet
        people = stack.people
        started = time.time()
        # The runs of an earlier batch (--warmup) are not waited for.
        with self.engine.connect() as conn:
            earlier = set(conn.execute(select(runs_table.c.run_id)).scalars())

        async def label(name: str) -> None:
            figs[name] = RunFigures(repo=name, status="not started", label_at=time.time())
            await stack.gh.add_label(
                people.owner, name, self.numbers[name], "repairbot", as_user=people.maintainer
            )

        await asyncio.gather(*(label(name) for name in names))
        ids = {
            n: repair_workflow_id(stack.gh.repo_id(f"{people.owner}/{n}"), self.numbers[n])
            for n in names
        }
        approved: set[str] = set()
        deadline = time.monotonic() + self.timeout
        last_report = 0.0
        while time.monotonic() < deadline:
            for name in fleet.revive():
                print(f"  {name} exited by itself; restarted", file=sys.stderr)
            self.sampler.sample()
            with self.engine.connect() as conn:
                rows = [
                    row
                    for row in conn.execute(
                        select(runs_table.c.workflow_id, runs_table.c.run_id, runs_table.c.status)
                    ).all()
                    if row.run_id not in earlier
                ]
                with_pr = (
                    set(
                        conn.execute(
                            select(tasks.c.run_id).where(
                                tasks.c.activity == "github.pull_request",
                                tasks.c.status == "completed",
                            )
                        ).scalars()
                    )
                    - earlier
                )
            by_id = {r.workflow_id: r for r in rows}
            settled = sum(1 for r in rows if r.status in SETTLED)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                print(
                    f"  {time.time() - started:6.1f}s  {len(rows)} runs, {settled} ended, "
                    f"{len(with_pr)} with a PR, {len(approved)} approved",
                    file=sys.stderr,
                )
            if len(rows) >= len(names) and settled == len(rows):
                break
            for name, wid in ids.items():
                row = by_id.get(wid)
                if name in approved or row is None or row.run_id not in with_pr:
                    continue
                if await stack.approve_when_awaiting_review(reader, row.run_id, name):
                    approved.add(name)
            await asyncio.sleep(0.25)
        return ids


def census_per_run(
    directory: Path, engine: Engine, runs: int, runs_in_database: int
) -> dict[str, dict[str, float]]:
    """Counts per run: each process's counters since the first measured label
    (by process kind), and the database's activities and workflow runs by
    name (over every run it holds, ``--warmup``'s too: all are alike)."""
    totals: dict[str, Counter[str]] = {}
    for path in directory.glob("*.json"):
        if path.name.endswith(".base.json"):
            continue
        now = json.loads(path.read_text())
        base_path = path.with_name(path.name.replace(".json", ".base.json"))
        base = json.loads(base_path.read_text()) if base_path.exists() else {}
        kind = "web" if " web " in f" {now.pop('_argv', '')} " else "workers"
        counts = totals.setdefault(kind, Counter())
        for key, value in now.items():
            counts[key] += value - base.get(key, 0)
    with engine.connect() as conn:
        totals["database"] = Counter(
            {
                **{
                    f"activity {name}": n
                    for name, n in conn.execute(
                        select(tasks.c.activity, func.count()).group_by(tasks.c.activity)
                    ).all()
                },
                **{
                    f"workflow {name}": n
                    for name, n in conn.execute(
                        select(runs_table.c.workflow_name, func.count()).group_by(
                            runs_table.c.workflow_name
                        )
                    ).all()
                },
                "history events": conn.execute(select(func.count()).select_from(history)).scalar()
                or 0,
                "attempts of activities": conn.execute(
                    select(func.count()).select_from(attempts)
                ).scalar()
                or 0,
            }
        )
    per_run = {kind: runs_in_database if kind == "database" else runs for kind in totals}
    return {
        kind: {key: round(n / max(1, per_run[kind]), 2) for key, n in counts.most_common() if n}
        for kind, counts in totals.items()
    }


def census_report(census: dict[str, dict[str, float]]) -> list[str]:
    lines = ["", "Per run (`--census`):", ""]
    for kind, counts in census.items():
        groups: dict[str, float] = {}
        for key, n in counts.items():
            group = key.split(" ", 1)[0]
            groups[group] = groups.get(group, 0.0) + n
        lines.append(
            f"- {kind}: " + ", ".join(f"{group} {n:.1f}" for group, n in sorted(groups.items()))
        )
        lines += [f"  - {n:.2f} {key}" for key, n in counts.items() if n >= 0.5]
    return lines


def summarize(result: LoadResult, figs: list[RunFigures]) -> None:
    def p50_p95(values: list[float | None]) -> tuple[float | None, float | None]:
        present = [v for v in values if v is not None]
        return percentile(present, 50), percentile(present, 95)

    result.overhead_p50, result.overhead_p95 = p50_p95([f.overhead for f in figs])
    result.overhead_without_git_p50, result.overhead_without_git_p95 = p50_p95(
        [f.overhead_without_git for f in figs]
    )
    result.gaps_p50, result.gaps_p95 = p50_p95([f.runtime_gaps for f in figs])
    result.label_to_pr_p50, result.label_to_pr_p95 = p50_p95([f.label_to_pr for f in figs])
    result.label_to_start_p50, result.label_to_start_p95 = p50_p95([f.label_to_start for f in figs])
    with_pr = [f for f in figs if f.pr_at is not None]
    names = sorted({name for f in with_pr for name in f.activity_seconds})
    result.activity_seconds = {
        name: round(sum(f.activity_seconds.get(name, 0.0) for f in with_pr) / len(with_pr), 3)
        for name in names
    }


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def cpu_per_run(result: LoadResult) -> str:
    runs = max(1, result.runs)
    own = sum(o for o, _ in result.cpu_seconds.values()) / runs
    children = sum(c for _, c in result.cpu_seconds.values()) / runs
    parts = ", ".join(
        f"{name} {o / runs:.2f} + {c / runs:.2f}" for name, (o, c) in result.cpu_seconds.items()
    )
    return f"{own:.2f} + {children:.2f} ({parts})"


def report(result: LoadResult) -> str:
    lines = [
        f"revision {result.revision}; {result.machine}; load {result.load_before} -> "
        f"{result.load_after}",
        f"{result.runs} runs, {result.workers} worker processes x {result.concurrency} jobs, "
        "PostgreSQL + Redis (arq)"
        + (f"; measured after {result.warmup} warm-up runs" if result.warmup else ""),
        "",
        "| figure | value |",
        "|---|---|",
        f"| runs completed (merged) | {result.completed} / {result.runs} |",
        f"| runs with exactly one branch, PR, status comment | {result.exact} / {result.runs} |",
        f"| outcomes | {', '.join(f'{k} {v}' for k, v in sorted(result.outcomes.items()))} |",
        f"| not merged | {len(result.lost)} {result.lost[:5] if result.lost else ''} |",
        f"| duplicated | {len(result.duplicated)} "
        f"{result.duplicated[:5] if result.duplicated else ''} |",
        f"| wall time, first label to last end | {result.elapsed:.1f} s |",
        f"| runs per minute | {result.runs_per_minute:.1f} |",
        f"| label to draft PR, p50 / p95 | {_s(result.label_to_pr_p50)} / "
        f"{_s(result.label_to_pr_p95)} |",
        f"| bot overhead (excl. agent, repository commands), p50 / p95 | "
        f"{_s(result.overhead_p50)} / {_s(result.overhead_p95)} |",
        f"| ... also excluding workspace builds (git), p50 / p95 | "
        f"{_s(result.overhead_without_git_p50)} / {_s(result.overhead_without_git_p95)} |",
        f"| ... of which label to run started (webhook, intake), p50 / p95 | "
        f"{_s(result.label_to_start_p50)} / {_s(result.label_to_start_p95)} |",
        f"| ... runtime gaps (no activity running), p50 / p95 | "
        f"{_s(result.gaps_p50)} / {_s(result.gaps_p95)} |",
        f"| peak database connections (pg_stat_activity) | {result.peak_connections} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(result.peak_connections_by_process.items()))})"
        " |",
        f"| processes that exited by themselves and were restarted | "
        f"{', '.join(f'{k} x{v}' for k, v in result.restarts.items()) or 'none'} |",
        f"| CPU seconds per run: repairbot processes (own + their children: git, "
        f"sandbox, agent) | {cpu_per_run(result)} |",
        f"| CPU seconds per run: the emulated GitHub (own + its git processes) | "
        f"{result.emulator_cpu_seconds[0] / max(1, result.runs):.2f} + "
        f"{result.emulator_cpu_seconds[1] / max(1, result.runs):.2f} |",
        f"| CPU seconds per run: PostgreSQL (every process; at least) | "
        f"{result.postgres_cpu_seconds / max(1, result.runs):.2f} |",
        f"| CPU seconds per run: the benchmark's pollers and approvals | "
        f"{result.bench_cpu_seconds / max(1, result.runs):.2f} |",
        *(
            [
                f"| idle CPU before the labels, CPU-s per second ({result.idle_seconds:.0f} s) "
                f"| {', '.join(f'{k} {v:.4f}' for k, v in result.idle_cpu.items())} |"
            ]
            if result.idle_cpu
            else []
        ),
        f"| peak RSS per process | "
        f"{', '.join(f'{k} {v} MiB' for k, v in result.peak_rss_mib.items())} |",
        "",
        "Mean seconds per run in each activity before the draft PR:",
        "",
        "| activity | seconds |",
        "|---|---|",
        *(
            f"| {name} | {secs:.2f} |"
            for name, secs in sorted(result.activity_seconds.items(), key=lambda kv: -kv[1])
        ),
    ]
    if result.census:
        lines += census_report(result.census)
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="jobs per worker")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        help="admin URL; a fresh database is made beside it and dropped after",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/7"),
        help="a Redis database of its own (it is flushed)",
    )
    parser.add_argument("--json", type=Path, help="write the figures (and per run) here")
    parser.add_argument("--keep", type=Path, help="keep processes' logs and data here")
    parser.add_argument(
        "--census",
        action="store_true",
        help="count per run what repairbot's processes do (bench/load_census/): "
        "subprocesses, SQL statements, GitHub requests, store calls; costs CPU itself",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the workers with py-spy from the first label on, write their "
        "stacks here and print where their CPU went (bench/load_profile.py)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="RUNS",
        help="first run RUNS whole runs, left out of every figure, so the figures are "
        "those of processes past their once-only work (imports, connections, "
        "compiled statements)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first measure each process's CPU for SECONDS with nothing to do "
        "(with --profile, its stacks go to DIR/idle)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with fresh_database(POSTGRES, admin_url=args.postgres) as url:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            result = asyncio.run(run_load(args, url, args.keep))
        else:
            with tempfile.TemporaryDirectory(prefix="repairbot-load-") as tmp:
                result = asyncio.run(run_load(args, url, Path(tmp)))
    print(report(result))
    if args.profile is not None:
        print("\n".join(["", "Where the workers' CPU went (`--profile`):", ""]))
        print("\n".join(load_profile.summary(args.profile)))
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=1))
    return 0 if result.exact == result.runs else 1


if __name__ == "__main__":
    sys.exit(main())
