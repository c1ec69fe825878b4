"""A real worker process for the crash tests, and the workflows it runs.

    python -m tests.engine.crash_worker --db URL --record PATH [--fault POINT[@N]]
        [--worker-id ID] [--arq REDIS_URL] [--tickets PATH] [--gate PATH]
        [--reconcile-interval S] [--relay-grace S] [--poll-delay S] [--standby PATH]

It builds a :class:`Runtime` with ``fault_point=POINT[@N]`` and runs until it
is killed: in-process dispatch by default, arq workers against Redis with
``--arq``. The test process starts workflows straight into the database; this
process's reconciler finds them through the outbox.

Every activity execution appends one JSON line to the ``--record`` file
(``O_APPEND``, one ``write``: atomic across processes) *before* returning, so
executions are counted outside the runtime's own bookkeeping.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._db import make_engine
from app.engine._errors import ActivityCancelled, ActivityError
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import Absent, ActivityDefn, Found, Registry, activity, workflow
from app.engine._runtime import Runtime
from app.engine._typed import typed_workflow
from app.workflows.calls import first
from tests.engine.ticket_service import TicketService

#: Quick retries: a crash test waits for lease expiry, not for backoff.
RETRY = RetryPolicy(initial_interval=0.05, max_interval=0.2, max_attempts=5)
#: Activities that do not heartbeat: a killed attempt's lease runs out after
#: start_to_close. Short enough to keep tests fast, long enough that a healthy
#: attempt on a loaded machine never loses its lease (which would be a retry
#: the test could not tell from a bug).
QUICK = Timeouts(start_to_close=2.0)
#: Activities that heartbeat: a silent attempt loses its lease after 2 s.
#: Not less: with the suite spread over four processes on two cores, a live
#: worker now and then went 0.5 s without a heartbeat (or a test took longer
#: than that to freeze one), its lease was taken, and its own late write was
#: refused as stale: a retry the test could not tell from a bug.
HEARTBEATING = Timeouts(heartbeat=2.0, start_to_close=30.0)


@dataclass(frozen=True)
class CrashDeps:
    """What this worker's activities reach outside the runtime."""

    record: Path
    worker_id: str
    tickets: Path | None = None
    gate: Path | None = None

    def note(self, actx: ActivityContext, **extra: Any) -> None:
        """Append one line to the execution record: the external proof that
        the activity body ran (once per call)."""
        line = {
            "op": actx.operation_id,
            "activity": actx.activity,
            "attempt": actx.attempt,
            "pid": os.getpid(),
            "worker": self.worker_id,
            **extra,
        }
        data = (json.dumps(line, sort_keys=True) + "\n").encode()
        fd = os.open(self.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    async def hold_at_gate(self) -> None:
        """Block (without heartbeating) until the gate file exists; a worker
        started without ``--gate`` passes straight through."""
        while self.gate is not None and not self.gate.exists():
            await asyncio.sleep(0.02)


# -- activities ----------------------------------------------------------------


class CrashActivities:
    """This worker's activity bodies, given what they reach outside the runtime."""

    def __init__(self, deps: CrashDeps) -> None:
        self.deps = deps

    async def square(self, actx: ActivityContext, args: dict[str, int]) -> int:
        self.deps.note(actx)
        return args["i"] * args["i"]

    async def chunked(self, actx: ActivityContext, args: dict[str, int]) -> int:
        """Works in chunks and heartbeats after each one, with its progress."""
        self.deps.note(actx)
        for done in range(1, args["chunks"] + 1):
            await asyncio.sleep(0.02)
            await actx.heartbeat({"chunks_done": done})
        return args["chunks"]

    async def gated(self, actx: ActivityContext, _: Any) -> dict[str, Any]:
        """Heartbeats once, then (on a worker with a gate) goes silent until the
        gate opens: the shape of a worker that was paused and resumes late."""
        await actx.heartbeat({"phase": "started"})
        # Noted after the heartbeat committed: once the test sees this line, this
        # process holds no database lock and may be frozen safely.
        self.deps.note(actx)
        await self.deps.hold_at_gate()
        return {"attempt": actx.attempt, "worker": self.deps.worker_id}

    async def long_hold(self, actx: ActivityContext, _: Any) -> dict[str, Any]:
        """No heartbeats, a ten-minute start-to-close: only the worker's liveness can
        tell quickly that the attempt died with its worker."""
        self.deps.note(actx)
        await self.deps.hold_at_gate()
        return {"attempt": actx.attempt, "worker": self.deps.worker_id}

    async def until_stopped(self, actx: ActivityContext, args: dict[str, int]) -> str:
        """Heartbeats for ``chunks`` x 50 ms, or until told to stop."""
        self.deps.note(actx)
        for _ in range(args["chunks"]):
            if await actx.heartbeat():
                self.deps.note(actx, stopped=True)
                raise ActivityCancelled("asked to stop")
            await asyncio.sleep(0.05)
        self.deps.note(actx, finished=True)
        return "finished"

    async def open_ticket(self, actx: ActivityContext, args: dict[str, str]) -> dict[str, Any]:
        assert self.deps.tickets is not None, "this worker was started without --tickets"
        ticket = TicketService(self.deps.tickets).create_ticket(actx.operation_id, args["title"])
        self.deps.note(actx, ticket=ticket.id)
        return ticket.to_json()

    async def find_ticket(self, actx: ActivityContext, _: dict[str, str]) -> Found | Absent:
        """Reconcile: the ticket service answers by operation id whether the
        effect happened; a found ticket is the activity's result."""
        assert self.deps.tickets is not None, "this worker was started without --tickets"
        ticket = TicketService(self.deps.tickets).find(actx.operation_id)
        return Found(ticket.to_json()) if ticket else Absent()

    def defns(self) -> list[ActivityDefn]:
        """The activities declared below (names, options), run on this object."""
        return [
            replace(square, fn=self.square),
            replace(chunked, fn=self.chunked),
            replace(gated, fn=self.gated),
            replace(long_hold, fn=self.long_hold),
            replace(until_stopped, fn=self.until_stopped),
            replace(open_ticket, fn=self.open_ticket),
            replace(open_ticket_reconciled, fn=self.open_ticket, reconcile=self.find_ticket),
        ]


def _run_by_the_worker(name: str) -> Any:
    """A declaration's body: the workflows need the name and options only; the
    worker process runs the :class:`CrashActivities` method instead."""

    async def unbound(actx: ActivityContext, _: Any) -> Any:
        raise LookupError(f"{name} runs in a crash worker process only (CrashActivities)")

    return unbound


square = activity("square", retry=RETRY, timeouts=QUICK)(_run_by_the_worker("square"))
chunked = activity("chunked", retry=RETRY, timeouts=HEARTBEATING)(_run_by_the_worker("chunked"))
gated = activity("gated", retry=RETRY, timeouts=HEARTBEATING)(_run_by_the_worker("gated"))

#: Retried at once: a retry with a backoff is a deferred job, which arq starts
#: by its fallback poll (no doorbell rings at a due time), and the liveness
#: tests time the release and the doorbell, not a poll.
RETRY_AT_ONCE = RetryPolicy(initial_interval=0.0, max_attempts=5)

long_hold = activity("long_hold", retry=RETRY_AT_ONCE, timeouts=Timeouts(start_to_close=600))(
    _run_by_the_worker("long_hold")
)
until_stopped = activity("until_stopped", retry=RETRY, timeouts=HEARTBEATING)(
    _run_by_the_worker("until_stopped")
)
#: Plain retry: safe because the service is idempotent by operation id.
open_ticket = activity("open_ticket", retry=RETRY, timeouts=QUICK)(
    _run_by_the_worker("open_ticket")
)
#: The same effect with a reconcile function: a lost attempt is an ambiguous
#: failure, resolved by asking the service before any retry.
open_ticket_reconciled = activity(
    "open_ticket_reconciled",
    retry=RETRY,
    timeouts=QUICK,
    reconcile=_run_by_the_worker("open_ticket_reconciled"),
)(_run_by_the_worker("open_ticket_reconciled"))


@workflow("crash_stop_one")
async def crash_stop_one(ctx: WorkflowContext, args: dict[str, Any]) -> dict[str, Any]:
    """Stops its activity when a timer fires first (as a run deadline does)."""
    work = ctx.activity(until_stopped, {"chunks": args["chunks"]}, step="work")
    if await first(work, ctx.sleep(args["seconds"])) == 1:
        await ctx.cancel_activity(work)
    if work.error is not None:
        assert isinstance(work.error, ActivityError)
        return {"work": work.error.failure_class, "error_type": work.error.error_type}
    return {"work": work.result}


@workflow("crash_long_hold")
async def crash_long_hold(ctx: WorkflowContext, _: Any) -> dict[str, Any]:
    held: dict[str, Any] = await ctx.activity(long_hold, None, step="hold")
    return held


# -- workflows -----------------------------------------------------------------


@workflow("crash_pipeline")
async def crash_pipeline(ctx: WorkflowContext, args: dict[str, int]) -> list[int]:
    """``steps`` activities in sequence; the result is their squares."""
    results: list[int] = []
    for i in range(args["steps"]):
        results.append(await ctx.activity(square, {"i": i}, step=f"step-{i}"))
    return results


@workflow("crash_heartbeat")
async def crash_heartbeat(ctx: WorkflowContext, args: dict[str, int]) -> dict[str, int]:
    before = await ctx.activity(square, {"i": 2}, step="before")
    chunks = await ctx.activity(chunked, {"chunks": args["chunks"]}, step="chunked")
    after = await ctx.activity(square, {"i": 3}, step="after")
    return {"before": before, "chunks": chunks, "after": after}


@workflow("crash_stale")
async def crash_stale(ctx: WorkflowContext, _: Any) -> dict[str, Any]:
    before = await ctx.activity(square, {"i": 2}, step="before")
    held = await ctx.activity(gated, None, step="gated")
    after = await ctx.activity(square, {"i": 3}, step="after")
    return {"before": before, "gated": held, "after": after}


@workflow("ticket_flow")
async def ticket_flow(ctx: WorkflowContext, args: dict[str, Any]) -> dict[str, Any]:
    defn = open_ticket_reconciled if args.get("reconcile") else open_ticket
    ticket: dict[str, Any] = await ctx.activity(defn, {"title": args["title"]}, step="ticket")
    return {"ticket_id": ticket["id"]}


class ChildInput(BaseModel):
    n: int


class ChildResult(BaseModel):
    n: int


@typed_workflow("crash_child")
async def crash_child(ctx: WorkflowContext, input: ChildInput) -> ChildResult:
    return ChildResult(n=input.n)


class ParentInput(BaseModel):
    child_id: str


class ParentResult(BaseModel):
    child_run: str


@typed_workflow("crash_parent")
async def crash_parent(ctx: WorkflowContext, input: ParentInput) -> ParentResult:
    """Starts one child (``ctx.start_workflow``, a recorded command) and ends."""
    child_run: str = await ctx.start_workflow(crash_child, ChildInput(n=7), id=input.child_id)
    return ParentResult(child_run=child_run)


class StarterResult(BaseModel):
    run_id: str
    created: bool


@typed_workflow("crash_starter")
async def crash_starter(ctx: WorkflowContext, input: ParentInput) -> StarterResult:
    """Starts one run by id (``ctx.start_run``, a recorded command) and ends."""
    started = await ctx.start_run(crash_child, ChildInput(n=7), id=input.child_id)
    return StarterResult(run_id=started.run_id, created=started.created)


REGISTRY = Registry.of(
    [
        crash_starter,
        crash_pipeline,
        crash_heartbeat,
        crash_stale,
        ticket_flow,
        crash_long_hold,
        crash_stop_one,
        crash_parent,
        crash_child,
    ],
    [square, chunked, gated, open_ticket, open_ticket_reconciled, long_hold, until_stopped],
)


# -- the process ---------------------------------------------------------------


def build_runtime(args: argparse.Namespace) -> Runtime:
    deps = CrashDeps(
        record=Path(args.record),
        worker_id=args.worker_id,
        tickets=Path(args.tickets) if args.tickets else None,
        gate=Path(args.gate) if args.gate else None,
    )
    # The workflows of REGISTRY, with the activities run on this process's deps.
    registry = Registry(workflows=dict(REGISTRY.workflows))
    for defn in CrashActivities(deps).defns():
        registry.add_activity(defn)
    runtime = Runtime(
        make_engine(args.db),
        registry,
        worker_id=args.worker_id,
        fault_point=args.fault,
        reconcile_interval=args.reconcile_interval,
        relay_grace=args.relay_grace,
        liveness_interval=args.liveness_interval or min(1.0, args.worker_silence / 4),
        worker_silence=args.worker_silence,
        db_patience=args.db_patience,
    )
    # 0: no execution is kept, so every completion and workflow task commits
    # on its own (the unfused path), never fused (app/engine/_store/fused.py).
    runtime.worker.cache.capacity = args.cache_size
    return runtime


async def run_in_process(runtime: Runtime) -> None:
    await runtime.start_in_process()
    await asyncio.Event().wait()  # until killed


async def run_arq(runtime: Runtime, args: argparse.Namespace) -> None:
    from app.engine._serve import serve_arq

    # Wired as app/main/worker_process.py wires it: SIGTERM drains, SIGKILL is a crash.
    await serve_arq(
        runtime,
        args.arq,
        concurrency=8,
        reconcile_interval=args.reconcile_interval,
        drain_grace=args.drain_grace,
        poll_delay=args.poll_delay,
        eager=not args.dispatch_only,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.engine.crash_worker")
    parser.add_argument("--db", required=True, help="database URL (SQLite file or PostgreSQL)")
    parser.add_argument("--record", required=True, help="execution record file (JSON lines)")
    parser.add_argument("--fault", default="", help="fault point to die at, POINT[@N]")
    parser.add_argument("--worker-id", default=f"pid-{os.getpid()}")
    parser.add_argument("--arq", metavar="REDIS_URL", help="dispatch through arq on this Redis")
    parser.add_argument("--tickets", help="ticket service SQLite file")
    parser.add_argument("--gate", help="activities that hold at the gate wait for this file")
    parser.add_argument("--reconcile-interval", type=float, default=0.05)
    parser.add_argument("--relay-grace", type=float, default=0.2)
    parser.add_argument("--worker-silence", type=float, default=15.0)
    parser.add_argument(
        "--liveness-interval",
        type=float,
        default=None,
        help="seconds between liveness beats (default: a quarter of the silence, at most 1)",
    )
    parser.add_argument("--drain-grace", type=float, default=5.0)
    parser.add_argument(
        "--poll-delay", type=float, default=0.01, help="with --arq: fallback poll of the queues"
    )
    parser.add_argument("--db-patience", type=float, default=15.0)
    parser.add_argument("--cache-size", type=int, default=1000, help="executions kept")
    parser.add_argument(
        "--dispatch-only",
        action="store_true",
        help="with --arq: send every job through Redis (no eager follow-up jobs)",
    )
    parser.add_argument(
        "--standby",
        metavar="PATH",
        help="touch nothing until PATH exists (spawned early to hide interpreter start-up)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # `kill -USR1 <pid>` prints every thread's stack to the log: a hung worker explains itself.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    while args.standby and not os.path.exists(args.standby):
        time.sleep(0.01)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {args.worker_id} %(name)s %(levelname)s %(message)s",
    )
    runtime = build_runtime(args)
    logging.getLogger("crash_worker").info(
        "worker %s (pid %s) up, fault=%r, arq=%s",
        args.worker_id,
        os.getpid(),
        args.fault,
        bool(args.arq),
    )
    asyncio.run(run_arq(runtime, args) if args.arq else run_in_process(runtime))


if __name__ == "__main__":
    main()
