"""Chaos: concurrent repairs over the emulated GitHub while everything that
can fail in production fails.

Six repositories each get a labelled issue at once. Three ``repairbot
worker`` processes (arq on a private Redis, a private PostgreSQL) and one
``repairbot web`` process serve them, while the test:

- SIGKILLs workers at random moments (each comes back as a new process);
- SIGKILLs the web process while reviewers approve, so GitHub's deliveries
  of those approvals fail; once the web is back, the failed deliveries are
  redelivered from the emulator's own log, as an operator (or a delivery
  reconciler) would through GitHub's delivery API;
- flushes Redis;
- restarts PostgreSQL;
- SIGSTOPs a worker while it holds an attempt and resumes it only after its
  lease moved to another worker (fencing must reject its late write).

Then GitHub (the emulator) must show exactly one branch, one pull request,
one status comment and one merge per issue; every run must have ended
merged and the outbox must be empty. Settle time (last fault to last merge)
and label-to-merge p50/p95 are printed (see docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select

from app.config import Settings
from app.contracts.ids import repair_workflow_id
from app.demo.project import FIXED_LINE, ISSUE_BODY, ISSUE_TITLE, fix_agent_command, write_project
from app.demo.spawn import spawn_repairbot
from app.demo.stack import LocalStack
from app.engine._db import make_engine
from app.engine._runtime import Runtime
from app.engine._store.schema import STALE_WRITES, counters, outbox, tasks
from app.main.catalog import build_registry
from app.operations.migrate import upgrade
from tests.engine.private_services import PrivatePostgres, PrivateRedis, wait_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(900)]

REPAIRS = 6
WORKERS = 3
#: Activities whose attempt may be frozen and resumed late without a second
#: external effect racing the first (they only read GitHub or work locally).
PAUSABLE = ("commands.", "agent.", "workspace.")
#: How long each agent attempt takes: past the last timed fault (20 s).
AGENT_SECONDS = 25.0


@dataclass
class Proc:
    """A repairbot process that can be killed, paused and restarted."""

    name: str
    argv: list[str]
    settings: Settings
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    generation: int = 0

    @property
    def worker_id(self) -> str:
        return f"{self.name}-g{self.generation}"

    def start(self) -> None:
        self.generation += 1
        with self.log_path.open("ab") as log:
            self.popen = spawn_repairbot(
                self.argv, self.settings, log=log, extra_env={"REPAIRBOT_WORKER_ID": self.worker_id}
            )

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()

    def signal(self, signum: int) -> None:
        assert self.popen is not None
        os.kill(self.popen.pid, signum)


@dataclass
class Issue:
    repo: str
    number: int
    labelled_at: float
    merged_at: float | None = None
    approved: bool = False


@dataclass
class Chaos:
    faults: list[tuple[float, str]] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.faults.append((time.monotonic(), what))
        print(f"chaos: {what}", flush=True)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[LocalStack, PrivatePostgres, PrivateRedis]]:
    pg = PrivatePostgres.in_temp_dir().init().start()
    redis = PrivateRedis(tmp_path / "redis").start()
    upgrade(pg.url)
    stack = LocalStack(root=tmp_path)
    await stack.start_github(write_project(tmp_path / "project"), database_url=pg.url)
    try:
        yield stack, pg, redis
    finally:
        await stack.stop()
        redis.stop()
        pg.destroy()


def _settings(stack: LocalStack, redis: PrivateRedis) -> Settings:
    assert stack.settings is not None
    return stack.settings.with_overrides(
        redis_url=redis.url,
        # The agent takes a while, so that every fault of the plan (the last
        # is due 20 s in) meets repairs still in progress: without it the
        # repairs got fast enough to be awaiting review before the plan could
        # find a worker to freeze.
        agent_command=tuple(fix_agent_command(sleep=AGENT_SECONDS)),
        relay_grace=0.5,
        reconcile_interval=0.2,
        worker_silence=5.0,
        concurrency=4,
        drain_grace=2.0,
    )


async def _redeliver_failed(stack: LocalStack) -> int:
    """Redeliver every delivery whose every attempt failed (by GUID)."""
    attempts = await stack.gh.deliveries.list()
    ok = {d["guid"] for d in attempts if d["status"] == "OK"}
    failed = {d["guid"]: d["id"] for d in attempts if d["status"] != "OK" and d["guid"] not in ok}
    for delivery_id in failed.values():
        await stack.gh.deliveries.redeliver(delivery_id)
    return len(failed)


async def _github_counts(stack: LocalStack, issue: Issue) -> dict[str, Any]:
    owner, who = stack.people.owner, stack.people.owner
    base = f"/repos/{owner}/{issue.repo}"
    comments = await stack.gh.rest("GET", f"{base}/issues/{issue.number}/comments", as_user=who)
    pulls = await stack.gh.rest("GET", f"{base}/pulls?state=all", as_user=who)
    branches = await stack.gh.rest("GET", f"{base}/branches", as_user=who)
    return {
        "status_comments": sum(
            "repairbot:op=" in c["body"] and "status" in c["body"] for c in comments
        ),
        "pulls": len(pulls),
        "merged": sum(p["merged_at"] is not None for p in pulls),
        "branches": sorted(b["name"] for b in branches),
        "main_fixed": FIXED_LINE in _main_file(stack, issue.repo),
    }


def _main_file(stack: LocalStack, repo_name: str) -> str:
    """slugify/__init__.py on main, read from the emulator's bare repository."""
    from emulator.git import BareRepo

    assert stack.emulator is not None
    repo = stack.emulator.store.repo(stack.people.owner, repo_name)
    assert repo is not None
    git = BareRepo(repo.path)
    sha = git.resolve("refs/heads/main")
    assert sha is not None
    content = git.read_file(sha, "slugify/__init__.py")
    assert content is not None
    return content.decode()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def test_repairs_survive_chaos(
    world: tuple[LocalStack, PrivatePostgres, PrivateRedis], tmp_path: Path
) -> None:
    stack, pg, redis = world
    settings = _settings(stack, redis)
    web_port = int(stack.app_url.rsplit(":", 1)[1])
    assert stack._app_socket is not None
    stack._app_socket.close()  # the web process listens there instead
    web = Proc("web", ["web", "--port", str(web_port)], settings, tmp_path / "web.log")
    workers = [
        Proc(f"w{i}", ["worker"], settings, tmp_path / f"worker-{i}.log") for i in range(WORKERS)
    ]
    reader = Runtime(make_engine(settings.database_url), build_registry())
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "10")))
    chaos = Chaos()
    issues: list[Issue] = []
    try:
        web.start()
        for worker in workers:
            worker.start()
        wait_port(web_port, up=True, timeout=120)

        people = stack.people
        for i in range(REPAIRS):
            name = f"slugify-{i}"
            await stack.gh.create_repo_from_folder(people.owner, name, tmp_path / "project")
            await stack.gh.set_permission(people.owner, name, people.maintainer, "write")
        started = time.monotonic()
        for i in range(REPAIRS):
            name = f"slugify-{i}"
            issue = await stack.gh.create_issue(
                people.owner, name, as_user=people.owner, title=ISSUE_TITLE, body=ISSUE_BODY
            )
            await stack.gh.add_label(
                people.owner, name, int(issue["number"]), "repairbot", as_user=people.maintainer
            )
            issues.append(Issue(name, int(issue["number"]), time.monotonic()))

        plan = _Plan(stack, pg, redis, web, workers, reader, rng, chaos, started)
        plan.web_port = web_port
        deadline = started + 480
        while not all(i.merged_at for i in issues):
            assert time.monotonic() < deadline, _report(issues, reader, stack, tmp_path)
            await plan.step(issues)
            await asyncio.sleep(0.1)
        assert plan.done(), f"not every fault was injected: {plan.pending()}"
        settled = time.monotonic()

        # GitHub's truth, per issue: one PR, one status comment, one merge, no branch left.
        for issue in issues:
            counts = await _github_counts(stack, issue)
            assert counts == {
                "status_comments": 1,
                "pulls": 1,
                "merged": 1,
                # The run's branch is deleted once its pull request merged.
                "branches": ["main"],
                "main_fixed": True,
            }, (issue, counts)
            run = reader.store.find_run(
                repair_workflow_id(stack.gh.repo_id(f"{people.owner}/{issue.repo}"), issue.number)
            )
            assert run is not None and run.status == "completed", run
            assert run.result["outcome"] == "merged"

        await _eventually(
            lambda: _stale_writes(reader) >= 1, "the resumed worker's late write rejected", 60
        )
        await _eventually(lambda: _outbox_depth(reader) == 0, "the outbox to empty", 60)

        last_fault = max(t for t, _ in chaos.faults)
        latencies = [i.merged_at - i.labelled_at for i in issues if i.merged_at]
        print(
            f"\nCHAOS RESULT repairs={REPAIRS} workers={WORKERS} faults={len(chaos.faults)} "
            f"settle_after_last_fault={settled - last_fault:.1f}s "
            f"label_to_merge_p50={statistics.median(latencies):.1f}s "
            f"p95={_percentile(latencies, 0.95):.1f}s total={settled - started:.1f}s",
            flush=True,
        )
    finally:
        for proc in [web, *workers]:
            if proc.popen is not None and proc.popen.poll() is None:
                with_suppressed(lambda p=proc: p.signal(signal.SIGCONT))
                proc.kill()
        reader.engine.dispose()


def with_suppressed(call: Any) -> None:
    with contextlib.suppress(OSError):
        call()


def _stale_writes(reader: Runtime) -> int:
    with reader.engine.connect() as conn:
        found = conn.execute(select(counters.c.value).where(counters.c.name == STALE_WRITES))
        return int(found.scalar() or 0)


def _outbox_depth(reader: Runtime) -> int:
    with reader.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(outbox)).scalar_one())


async def _eventually(check: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        await asyncio.sleep(0.1)


def _report(issues: list[Issue], reader: Runtime, stack: LocalStack, tmp_path: Path) -> str:
    lines = ["repairs did not all merge in time:"]
    for issue in issues:
        wid = repair_workflow_id(
            stack.gh.repo_id(f"{stack.people.owner}/{issue.repo}"), issue.number
        )
        try:
            run = reader.store.find_run(wid)
            status = reader.query(run.run_id, "status") if run else None
        except Exception as exc:  # the report must not hide the failure
            run, status = None, repr(exc)
        lines.append(f"  {issue}: {run and run.status} {status}")
    for log in sorted(tmp_path.glob("*.log")):
        lines.append(f"--- {log.name} (tail)\n{log.read_text(errors='replace')[-2500:]}")
    return "\n".join(lines)


class _Plan:
    """The faults, each injected once, in an order tied to the runs' progress."""

    def __init__(
        self,
        stack: LocalStack,
        pg: PrivatePostgres,
        redis: PrivateRedis,
        web: Proc,
        workers: list[Proc],
        reader: Runtime,
        rng: random.Random,
        chaos: Chaos,
        started: float,
    ) -> None:
        self.stack, self.pg, self.redis, self.web = stack, pg, redis, web
        self.workers, self.reader, self.rng, self.chaos = workers, reader, rng, chaos
        self.started = started
        self.todo = {
            "kill-worker-1",
            "flush-redis",
            "restart-pg",
            "web-down",
            "pause",
            "kill-worker-2",
        }
        self.paused: tuple[Proc, int, int] | None = None
        self.web_port = 0

    def done(self) -> bool:
        return not self.todo and self.paused is None

    def pending(self) -> set[str]:
        return self.todo

    def _due(self, name: str, after: float) -> bool:
        return name in self.todo and time.monotonic() - self.started >= after

    async def step(self, issues: list[Issue]) -> None:
        statuses = self._statuses(issues)
        if statuses is None:
            return  # the database is away (we restarted it): look again shortly
        for issue, status in zip(issues, statuses, strict=True):
            if status is None:
                continue
            run_status, phase, pull = status
            if run_status == "completed" and issue.merged_at is None:
                issue.merged_at = time.monotonic()
            if phase == "awaiting-review" and pull and not issue.approved:
                if "web-down" in self.todo:
                    await self._web_down_while_approving(issues, statuses)
                    return
                await self._approve(issue, pull)
        if self._due("kill-worker-1", 3):
            self._kill_worker("kill-worker-1")
        elif self._due("flush-redis", 6):
            client = Redis.from_url(self.redis.url)
            await client.flushall()
            await client.aclose()
            self.todo.discard("flush-redis")
            self.chaos.note("Redis flushed")
        elif self._due("restart-pg", 9):
            self.chaos.note("PostgreSQL stopping")
            await asyncio.to_thread(self.pg.restart, 2.0)
            self.todo.discard("restart-pg")
            self.chaos.note("PostgreSQL back")
        elif self._due("pause", 12) and self.paused is None:
            self._pause_a_holder()
        elif self._due("kill-worker-2", 20) and self.paused is None:
            self._kill_worker("kill-worker-2")
        if self.paused is not None:
            self._resume_when_lease_moved()

    def _statuses(
        self, issues: list[Issue]
    ) -> list[tuple[str, str | None, int | None] | None] | None:
        out: list[tuple[str, str | None, int | None] | None] = []
        try:
            for issue in issues:
                full_name = f"{self.stack.people.owner}/{issue.repo}"
                wid = repair_workflow_id(self.stack.gh.repo_id(full_name), issue.number)
                run = self.reader.store.find_run(wid)
                if run is None:
                    out.append(None)
                    continue
                status = self.reader.query(run.run_id, "status") if run.status == "running" else {}
                out.append((run.status, status.get("phase"), status.get("pull_number")))
        except Exception:
            return None
        return out

    async def _approve(self, issue: Issue, pull: int) -> None:
        people = self.stack.people
        await self.stack.gh.review(
            people.owner, issue.repo, int(pull), as_user=people.maintainer, event="APPROVE"
        )
        issue.approved = True

    async def _web_down_while_approving(
        self, issues: list[Issue], statuses: list[tuple[str, str | None, int | None] | None]
    ) -> None:
        """Kill the web, approve what awaits review (those deliveries fail), bring
        the web back and redeliver what failed."""
        self.web.kill()
        self.chaos.note("web SIGKILLed")
        for issue, status in zip(issues, statuses, strict=True):
            if status and status[1] == "awaiting-review" and status[2] and not issue.approved:
                await self._approve(issue, status[2])
        # The emulator tries each delivery once (GitHub does not retry): let
        # those attempts fail before the web comes back.
        assert self.stack.emulator is not None
        await asyncio.to_thread(self.stack.emulator.dispatcher.wait_idle, 30.0)
        self.web.start()
        await asyncio.to_thread(wait_port, self.web_port, up=True, timeout=120)
        redelivered = await _redeliver_failed(self.stack)
        assert redelivered >= 1, "no delivery failed while the web was down"
        self.todo.discard("web-down")
        self.chaos.note(f"web back; {redelivered} failed deliveries redelivered")

    def _kill_worker(self, name: str) -> None:
        worker = self.rng.choice(self.workers)
        worker.kill()
        self.chaos.note(f"{worker.worker_id} SIGKILLed")
        worker.start()
        self.todo.discard(name)

    def _pause_a_holder(self) -> None:
        """Freeze a worker that holds a (local-effect) attempt."""
        try:
            with self.reader.engine.connect() as conn:
                rows = conn.execute(
                    select(
                        tasks.c.id, tasks.c.fencing_token, tasks.c.worker_id, tasks.c.activity
                    ).where(tasks.c.status == "running", tasks.c.started_at < time.time() - 0.3)
                ).all()
        except Exception:
            return
        for row in rows:
            if not row.activity.startswith(PAUSABLE):
                continue
            for worker in self.workers:
                if row.worker_id.startswith(worker.worker_id + "/"):
                    worker.signal(signal.SIGSTOP)
                    self.paused = (worker, row.id, row.fencing_token)
                    self.todo.discard("pause")
                    self.chaos.note(f"{worker.worker_id} SIGSTOPped holding {row.activity}")
                    return

    def _resume_when_lease_moved(self) -> None:
        assert self.paused is not None
        worker, task_id, token = self.paused
        try:
            with self.reader.engine.connect() as conn:
                now = conn.execute(
                    select(tasks.c.fencing_token).where(tasks.c.id == task_id)
                ).scalar_one()
        except Exception:
            return
        if now != token:
            worker.signal(signal.SIGCONT)
            self.paused = None
            self.chaos.note(f"{worker.worker_id} resumed after its lease moved")
