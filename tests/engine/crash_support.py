"""Driving crash tests: real worker processes, an external execution record,
polling with deadlines, and checks that history was never half-written.

A :class:`CrashLab` is used as a context manager in each test. It starts
workflows straight into the database (no dispatcher in the test process, so
only worker processes ever run work), spawns ``tests.engine.crash_worker``
processes, and on the way out kills whatever it spawned. If the test failed,
it prints every worker's log, every run's history and the execution record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import func, select

from app.engine import _history_commands as ev
from app.engine._db import make_engine
from app.engine._runtime import SETTLED
from app.engine._store import RunRow, Store
from app.engine._store.schema import runs
from app.engine._tables import ActivityTask, OutboxRow, WorkerRecord
from tests.engine.crash_worker import REGISTRY

ROOT = Path(__file__).resolve().parents[2]

tasks_table = ActivityTask.__table__  # type: ignore[attr-defined]
outbox_table = OutboxRow.__table__  # type: ignore[attr-defined]
workers_table = WorkerRecord.__table__  # type: ignore[attr-defined]

T = TypeVar("T")


@dataclass(frozen=True)
class Execution:
    """One line of the execution record: one run of an activity body."""

    op: str
    activity: str
    attempt: int
    pid: int
    worker: str
    raw: dict[str, Any]


class ExecutionRecord:
    """The JSON-lines file activities append to; read fresh on every call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[Execution]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            raw = json.loads(line)
            out.append(
                Execution(
                    raw["op"], raw["activity"], raw["attempt"], raw["pid"], raw["worker"], raw
                )
            )
        return out

    def of(self, op: str) -> list[Execution]:
        return [e for e in self.all() if e.op == op]

    def counts(self) -> Counter[str]:
        return Counter(e.op for e in self.all())

    def text(self) -> str:
        return self.path.read_text() if self.path.exists() else "(no executions recorded)\n"


class WorkerProcess:
    def __init__(
        self, worker_id: str, argv: list[str], log_path: Path, standby: Path | None = None
    ) -> None:
        self.worker_id = worker_id
        self.log_path = log_path
        self.standby = standby
        self._log = log_path.open("wb")
        self.popen = subprocess.Popen(
            argv, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def go(self) -> None:
        """Let a worker spawned in standby start working."""
        assert self.standby is not None, f"worker {self.worker_id} was not spawned in standby"
        self.standby.touch()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()  # SIGKILL also ends a stopped process
            self.popen.wait(timeout=10)
        self._log.close()


class CrashLab:
    def __init__(self, db_url: str, workdir: Path, *, redis_url: str | None = None) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.redis_url = redis_url
        self.engine = make_engine(db_url)
        self.store = Store(self.engine)
        self.record = ExecutionRecord(workdir / "executions.jsonl")
        self.tickets_path = workdir / "tickets.db"
        self.workers: list[WorkerProcess] = []
        self.run_ids: list[str] = []

    def __enter__(self) -> CrashLab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            print(self.diagnostics())  # pytest shows captured output of failed tests
        for worker in self.workers:
            worker.kill()
        self.engine.dispose()

    # -- driving ---------------------------------------------------------------

    def start(self, workflow: str, workflow_id: str, input: Any) -> str:
        """Start a run in the database only; a worker's reconciler will find it."""
        with self.store.transaction() as tx:
            started = tx.start_run(
                workflow_name=workflow,
                workflow_version=REGISTRY.latest_version(workflow),
                workflow_id=workflow_id,
                input=input,
            )
        self.run_ids.append(started.run_id)
        return started.run_id

    def spawn(
        self,
        worker_id: str,
        *,
        fault: str = "",
        gate: Path | None = None,
        arq: bool = False,
        standby: bool = False,
        reconcile_interval: float = 0.05,
        relay_grace: float = 0.2,
        worker_silence: float = 15.0,
        liveness_interval: float | None = None,
        dispatch_only: bool = False,
        drain_grace: float = 5.0,
        db_patience: float = 15.0,
        cache_size: int = 1000,
        poll_delay: float = 0.01,
    ) -> WorkerProcess:
        """A worker process; with ``standby`` it only loads its code and waits
        for :meth:`WorkerProcess.go`, so a test can pay interpreter start-up
        while another worker is still working towards its fault point."""
        argv = [
            sys.executable, "-m", "tests.engine.crash_worker",
            "--db", self.db_url,
            "--record", str(self.record.path),
            "--tickets", str(self.tickets_path),
            "--worker-id", worker_id,
            "--reconcile-interval", str(reconcile_interval),
            "--relay-grace", str(relay_grace),
            "--worker-silence", str(worker_silence),
            "--drain-grace", str(drain_grace),
            "--db-patience", str(db_patience),
            "--cache-size", str(cache_size),
        ]  # fmt: skip
        if liveness_interval is not None:
            argv += ["--liveness-interval", str(liveness_interval)]
        if fault:
            argv += ["--fault", fault]
        if gate is not None:
            argv += ["--gate", str(gate)]
        if arq:
            assert self.redis_url, "CrashLab(redis_url=...) is needed for arq workers"
            argv += ["--arq", self.redis_url, "--poll-delay", str(poll_delay)]
            if dispatch_only:
                argv.append("--dispatch-only")
        trigger = self.workdir / f"go-{worker_id}" if standby else None
        if trigger is not None:
            argv += ["--standby", str(trigger)]
        worker = WorkerProcess(worker_id, argv, self.workdir / f"worker-{worker_id}.log", trigger)
        self.workers.append(worker)
        return worker

    # -- waiting (poll a state with a deadline; never sleep to synchronise) ----

    def wait_until(self, probe: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)

    def wait_killed(self, worker: WorkerProcess, timeout: float = 60.0) -> None:
        """The worker must die by its own SIGKILL at the fault point (the
        deadline covers a worker's start-up on a loaded machine: one was
        still importing psycopg after 20 s in CI)."""
        try:
            self.wait_until(
                lambda: worker.popen.poll() is not None,
                f"worker {worker.worker_id} to hit its fault point",
                timeout,
            )
        except AssertionError:
            # Ask the stuck worker for its stacks (crash_worker registers
            # faulthandler on SIGUSR1); the diagnostics print its log.
            os.kill(worker.pid, signal.SIGUSR1)
            time.sleep(1.0)
            raise
        code = worker.popen.returncode
        assert code == -signal.SIGKILL, (
            f"worker {worker.worker_id} exited with {code}, not by SIGKILL at its fault point"
        )

    def wait_settled(self, run_id: str, timeout: float = 20.0) -> RunRow:
        def settled() -> RunRow | None:
            run = self.store.find_run(run_id)
            return run if run is not None and run.status in SETTLED else None

        return self.wait_until(settled, f"run {run_id} to settle", timeout)

    # -- reading the database ----------------------------------------------------

    def events(self, run_id: str) -> list[ev.RecordedEvent]:
        return self.store.load_events(run_id)

    def runs_under(self, workflow_id: str) -> int:
        """How many runs were ever started under ``workflow_id`` (exactly-once checks)."""
        with self.engine.connect() as conn:
            counted = select(func.count()).select_from(runs)
            return int(conn.execute(counted.where(runs.c.workflow_id == workflow_id)).scalar_one())

    def task_rows(self, run_id: str) -> list[Any]:
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    select(tasks_table)
                    .where(tasks_table.c.run_id == run_id)
                    .order_by(tasks_table.c.cmd)
                ).all()
            )

    def task(self, run_id: str, operation_suffix: str) -> Any:
        rows = [r for r in self.task_rows(run_id) if r.operation_id.endswith(operation_suffix)]
        assert len(rows) == 1, f"expected one task for {operation_suffix}, got {rows}"
        return rows[0]

    def liveness(self, worker_id: str) -> Any:
        """The ``workers`` row of the process spawned as ``worker_id`` (its
        recorded id is ``<worker_id>/<suffix>``), or None before its first beat."""
        with self.engine.connect() as conn:
            return conn.execute(
                select(workers_table).where(workers_table.c.worker_id.like(f"{worker_id}/%"))
            ).first()

    def outbox_rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(outbox_table).order_by(outbox_table.c.id)).all())

    def completions(self, run_id: str) -> Counter[str]:
        """How many times history accepted a result for each operation id."""
        scheduled = {
            e.data["cmd"]: e.data["operation_id"]
            for e in self.events(run_id)
            if e.type == ev.ACTIVITY_SCHEDULED
        }
        return Counter(
            scheduled[e.data["cmd"]] for e in self.events(run_id) if e.type == ev.ACTIVITY_COMPLETED
        )

    def diagnostics(self) -> str:
        parts = ["", "=" * 30 + " crash lab diagnostics " + "=" * 30]
        for worker in self.workers:
            parts.append(
                f"--- worker {worker.worker_id} (pid {worker.pid}, "
                f"exit {worker.popen.poll()}) log:\n{worker.log()}"
            )
        for run_id in self.run_ids:
            run = self.store.find_run(run_id)
            parts.append(f"--- run {run_id}: {run}")
            for event in self.events(run_id):
                parts.append(f"  {event.seq:3d} {event.type:20s} {json.dumps(event.data)}")
            for row in self.task_rows(run_id):
                parts.append(f"  task {dict(row._mapping)}")
            for attempt in self.store.activity_attempts(run_id):
                parts.append(f"  attempt {attempt}")
        parts.append(f"--- outbox: {[dict(r._mapping) for r in self.outbox_rows()]}")
        parts.append(f"--- execution record:\n{self.record.text()}")
        return "\n".join(parts)


def assert_history_sound(lab: CrashLab, run_id: str) -> None:
    """Nothing half-written: history is contiguous and matches the run's length,
    every activity task has the activity_scheduled event that created it (same
    command, same operation id), and no command was resolved twice."""
    run = lab.store.find_run(run_id)
    assert run is not None
    history = lab.events(run_id)
    assert [e.seq for e in history] == list(range(1, run.history_length + 1)), (
        f"history of {run_id} is not contiguous up to its length {run.history_length}"
    )
    scheduled = {
        e.data["cmd"]: e.data["operation_id"] for e in history if e.type == ev.ACTIVITY_SCHEDULED
    }
    for row in lab.task_rows(run_id):
        assert scheduled.get(row.cmd) == row.operation_id, (
            f"orphan activity task {row.operation_id} (cmd {row.cmd}): no matching "
            f"activity_scheduled event"
        )
    resolutions = Counter(
        e.data["cmd"] for e in history if e.type in (ev.ACTIVITY_COMPLETED, ev.ACTIVITY_FAILED)
    )
    assert all(n == 1 for n in resolutions.values()), f"a command resolved twice: {resolutions}"
    for row in lab.outbox_rows():
        if row.kind == "activity":
            assert _task_exists(lab, int(row.ref)), f"outbox row {row.job_id} names no task"


def _task_exists(lab: CrashLab, task_id: int) -> bool:
    with lab.engine.connect() as conn:
        found = conn.execute(select(tasks_table.c.id).where(tasks_table.c.id == task_id)).first()
    return found is not None


def by_step(record: ExecutionRecord) -> dict[str, list[Execution]]:
    """Executions grouped by the step part of the operation id (``<run id>:<step>``)."""
    grouped: dict[str, list[Execution]] = {}
    for execution in record.all():
        grouped.setdefault(execution.op.rsplit(":", 1)[-1], []).append(execution)
    return grouped


def assert_pipeline_recovered(
    lab: CrashLab, run_id: str, *, steps: int, in_flight: int, lost_by: str, retried_by: str
) -> None:
    """After a kill between step ``in_flight``'s effect and its recorded
    result: the run has the right result, every other step ran exactly once,
    the in-flight step ran exactly twice (the lost attempt and one retry), and
    history accepted one result per step."""
    run = lab.store.find_run(run_id)
    assert run is not None
    assert (run.status, run.result) == ("completed", [i * i for i in range(steps)])
    executions = by_step(lab.record)
    for i in range(steps):
        ran = [(e.attempt, e.worker) for e in executions.get(f"step-{i}", [])]
        if i == in_flight:
            assert ran == [(1, lost_by), (2, retried_by)], f"in-flight step-{i} ran {ran}"
        else:
            assert len(ran) == 1, f"step-{i} ran {len(ran)} times: {ran}"
    assert lab.completions(run_id) == {f"{run_id}:step-{i}": 1 for i in range(steps)}
    # The lost attempt is on record as such (its lease ran out), then the retry.
    attempts = [
        a for a in lab.store.activity_attempts(run_id)
        if a["operation_id"] == f"{run_id}:step-{in_flight}"
    ]  # fmt: skip
    # Worker ids carry a per-process suffix ("A/1f2e3d4c"): compare the configured part.
    # Two recoveries may both reach for the lost attempt (the lost worker's
    # sweep and its expired lease); fencing refuses the second, which the
    # record notes after the outcome ("; stale-failure-rejected").
    outcomes = [
        (a["attempt"], a["worker_id"].split("/")[0], a["outcome"].split("; ")[0]) for a in attempts
    ]
    assert outcomes == [
        (1, lost_by, "failed:transient"),
        (2, retried_by, "completed"),
    ]
    # Whichever notices first: the attempt's own lease, or the worker's silence.
    assert attempts[0]["error"]["error_type"] in ("StartToCloseTimeout", "WorkerLost")
    assert_history_sound(lab, run_id)
