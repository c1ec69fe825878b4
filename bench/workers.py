"""Worker processes for the concurrency benchmarks (throughput, waiting runs,
recovery): the runtime's production arq path (``app.engine._serve.serve_arq``,
as ``repairbot worker`` runs it) with the benchmark workflows registered
instead of the repair workflow, so no GitHub App or agent is needed.

    python -m bench.workers --database URL --redis URL --worker-id NAME
                            [--concurrency 8] [--worker-silence 15]

The orchestrator side (:class:`WorkerFleet`) starts them as real processes,
kills them with SIGKILL and reads their resident memory from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from app.config import Settings
from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._db import make_engine
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._serve import serve_arq
from bench import census, ours
from bench.environment import ROOT

#: Throughput: the 10-step workflow of bench.ours (one no-op activity per step).
STEPS = ours.WORKFLOW
#: Waiting runs: park on a signal with a 14-day timeout, end when it arrives.
PARKED = "bench-parked"
PARK_TIMEOUT = timedelta(days=14).total_seconds()
#: Recovery: one activity that hangs on its first attempt (the one killed).
HELD = "bench-held"
#: The first attempt's hang: far longer than any recovery being measured.
HANG = 3600.0

_DEFAULTS = Settings()


@workflow(PARKED)
async def parked(ctx: WorkflowContext, _input: None) -> str | None:
    signal = await ctx.wait_signal("go", timeout=PARK_TIMEOUT)
    return None if signal is None else str(signal.payload)


@activity(
    "bench-hold",
    # No backoff and no heartbeat timeout: the figure is how soon the engine
    # notices the dead worker (its liveness), not a retry policy's wait.
    retry=RetryPolicy(initial_interval=0.0, max_attempts=100),
    timeouts=Timeouts(start_to_close=2 * HANG),
)
async def hold(actx: ActivityContext, _input: None) -> int:
    if actx.attempt == 1:
        await asyncio.sleep(HANG)
    return actx.attempt


@workflow(HELD)
async def held(ctx: WorkflowContext, _input: None) -> int:
    attempts: int = await ctx.activity(hold, None, step="hold")
    return attempts


REGISTRY = Registry.of([ours.steps, parked, held], [ours.noop, hold])


# -- the worker process ---------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("--database", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--concurrency", type=int, default=_DEFAULTS.concurrency)
    parser.add_argument("--worker-silence", type=float, default=_DEFAULTS.worker_silence)
    parser.add_argument("--reconcile-interval", type=float, default=_DEFAULTS.reconcile_interval)
    parser.add_argument("--relay-grace", type=float, default=_DEFAULTS.relay_grace)
    parser.add_argument("--stats", type=Path, help="write counters here on SIGUSR1 (bench.census)")
    parser.add_argument("--sql-census", action="store_true", help="count SQL in --stats too")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    engine = make_engine(args.database)
    runtime = Runtime(
        engine,
        REGISTRY,
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        reconcile_interval=args.reconcile_interval,
        relay_grace=args.relay_grace,
        worker_silence=args.worker_silence,
    )
    if args.stats is not None:
        census.serve_stats(runtime, args.stats, sql=args.sql_census)
    try:
        return await serve_arq(
            runtime,
            args.redis,
            concurrency=args.concurrency,
            reconcile_interval=args.reconcile_interval,
            drain_grace=1.0,
        )
    finally:
        engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    return asyncio.run(serve(parse_args(argv)))


# -- the orchestrator's side ----------------------------------------------------


@dataclass
class WorkerProcess:
    name: str
    popen: subprocess.Popen[bytes]
    #: Killed or stopped by the orchestrator (not a crash to report).
    ended_here: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_kib(self) -> int:
        """Resident memory now (VmRSS), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError(f"no VmRSS for {self.name}")

    def kill(self) -> float:
        """SIGKILL; returns the wall-clock time (epoch seconds) of the kill."""
        self.ended_here = True
        at = time.time()
        os.kill(self.pid, signal.SIGKILL)
        self.popen.wait()
        return at

    def stop(self, timeout: float = 10.0) -> None:
        self.ended_here = True
        if not self.alive():
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


@dataclass
class WorkerFleet:
    """Benchmark worker processes on one database and Redis, logs in ``log_dir``."""

    database_url: str
    redis_url: str
    log_dir: Path
    concurrency: int = _DEFAULTS.concurrency
    worker_silence: float = _DEFAULTS.worker_silence
    relay_grace: float = _DEFAULTS.relay_grace
    #: Start each process with ``--stats`` (and ``--sql-census``), see bench.census.
    stats: bool = False
    sql_census: bool = False
    processes: list[WorkerProcess] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str) -> WorkerProcess:
        log = (self.log_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        argv = [sys.executable, "-m", "bench.workers", "--database", self.database_url]
        argv += ["--redis", self.redis_url, "--worker-id", name]
        argv += ["--concurrency", str(self.concurrency)]
        argv += ["--worker-silence", str(self.worker_silence)]
        argv += ["--relay-grace", str(self.relay_grace)]
        if self.stats:
            # A process of an earlier case may have left its counters there.
            self.stats_path(name).unlink(missing_ok=True)
            argv += ["--stats", str(self.stats_path(name))]
        if self.sql_census:
            argv.append("--sql-census")
        popen = subprocess.Popen(
            argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        process = WorkerProcess(name, popen)
        self.processes.append(process)
        return process

    def stats_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.stats.json"

    async def read_stats(self) -> list[dict[str, Any]]:
        """Every live process's counters now (started with ``stats``)."""
        return [
            await census.read_stats(p.pid, self.stats_path(p.name))
            for p in self.processes
            if p.alive()
        ]

    def by_worker_id(self, worker_id: str) -> WorkerProcess:
        """The process behind a recorded worker id (``<name>/<random>``)."""
        name = worker_id.split("/", 1)[0]
        return next(p for p in self.processes if p.name == name)

    def check_alive(self) -> None:
        dead = [p.name for p in self.processes if not p.alive() and not p.ended_here]
        if dead:
            tail = (self.log_dir / f"{dead[0]}.log").read_text()[-2000:]
            raise RuntimeError(f"worker process {dead} exited by itself:\n{tail}")

    def stop(self) -> None:
        for process in self.processes:
            process.stop()
        for log in self._logs:
            log.close()


if __name__ == "__main__":
    sys.exit(main())
