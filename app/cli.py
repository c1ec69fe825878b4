"""The ``repairbot`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app import logs
from app.config import ConfigError, Settings
from app.engine.db import make_engine
from app.engine.history import export_history
from app.engine.store import Store
from app.migrate import upgrade

Command = Callable[[argparse.Namespace, Settings], int]


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    upgrade(settings.database_url)
    print(f"database at {settings.database_url} is at the latest schema")
    return 0


def _store(settings: Settings) -> Store:
    return Store(make_engine(settings.database_url))


def cmd_runs_list(args: argparse.Namespace, settings: Settings) -> int:
    runs = _store(settings).list_runs(limit=args.limit, status=args.status)
    if not runs:
        print("no runs")
        return 0
    print(f"{'RUN':44} {'WORKFLOW':22} {'STATUS':24} {'EVENTS':>6}  STARTED")
    for run in runs:
        status = run.status + (f" ({run.cancel_phase})" if run.status == "cancelling" else "")
        workflow = f"{run.workflow_name}@{run.workflow_version}"
        print(
            f"{run.run_id:44} {workflow:22} {status:24} {run.history_length:>6}  "
            f"{_when(run.created_at)}"
        )
    return 0


def cmd_runs_show(args: argparse.Namespace, settings: Settings) -> int:
    store = _store(settings)
    run = store.find_run(args.run)
    if run is None:
        print(f"no run or workflow id {args.run!r}", file=sys.stderr)
        return 1
    print(f"run       {run.run_id}")
    print(f"workflow  {run.workflow_name}@{run.workflow_version}  (id {run.workflow_id})")
    print(f"status    {run.status}" + (f" / {run.cancel_phase}" if run.cancel_phase else ""))
    print(f"started   {_when(run.created_at)}   closed {_when(run.closed_at)}")
    if isinstance(run.result, dict):
        for key, value in run.result.items():
            if key != "evidence" and value is not None:
                print(f"  {key:14} {json.dumps(value, default=str)[:110]}")
    elif run.result is not None:
        print(f"result    {json.dumps(run.result)[:200]}")
    if run.error is not None:
        print(f"error     {json.dumps(run.error)}")
    phase = _phase_of(run, settings)
    if phase:
        print(
            f"phase     {phase.get('phase')}"
            + (f"  ({phase['detail']})" if phase.get("detail") else "")
        )
    evidence = (run.result or {}).get("evidence") if isinstance(run.result, dict) else None
    evidence = evidence or (phase or {}).get("evidence") or []
    if evidence:
        where = settings.evidence_dir if settings.evidence_store == "folder" else "the database"
        print(f"\nevidence (in {where}; `repairbot evidence get <sha256>` prints one):")
        for item in evidence:
            ref = item["ref"]
            print(f"  {item['label']:40} {ref['sha256']}  {ref['size']} bytes")
    print("\nhistory:")
    for event in store.load_events(run.run_id):
        data = {k: v for k, v in event.data.items() if k not in ("input_hash",)}
        print(f"  {event.seq:>4} {event.type:20} {json.dumps(data, default=str)[:160]}")
    attempts = store.activity_attempts(run.run_id)
    if attempts:
        print("\nattempts:")
        for a in attempts:
            print(
                f"  {a['operation_id']:40} #{a['attempt']} token {a['fencing_token']} "
                f"by {a['worker_id']} ({a['code_version']}): {a['outcome'] or 'running'}"
            )
    return 0


def _phase_of(run: Any, settings: Settings) -> dict[str, Any] | None:
    """The run's own account of where it is, if its workflow answers ``status``."""
    from app.engine.runtime import Runtime
    from app.registry import build_registry

    if run.status not in ("running", "cancelling"):
        return None
    runtime = Runtime(make_engine(settings.database_url), build_registry())
    try:
        answer = runtime.query(run.run_id, "status")
    except (KeyError, LookupError):
        return None
    return answer if isinstance(answer, dict) else None


def cmd_runs_export(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(export_history(_store(settings), args.run), indent=1))
    return 0


def cmd_example(args: argparse.Namespace, settings: Settings) -> int:
    from app.example_run import run_example

    return asyncio.run(run_example(settings, items=args.items))


def cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    from app.server import run_web

    return asyncio.run(run_web(settings, host=args.host, port=args.port, with_worker=False))


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from app.server import run_web

    return asyncio.run(run_web(settings, host=args.host, port=args.port, with_worker=True))


def _intake(settings: Settings) -> Any:
    from app.intake import Intake
    from app.registry import build_registry
    from handlers import build_router

    return Intake(_store(settings), build_registry(), build_router(), settings)


def cmd_deliveries_list(args: argparse.Namespace, settings: Settings) -> int:
    from app.deliveries import list_deliveries

    rows = list_deliveries(_store(settings), status=args.status, limit=args.limit)
    for row in rows:
        action = f".{row.action}" if row.action else ""
        print(f"{row.delivery_id:38} {row.event + action:34} {row.status:9} {row.detail or ''}")
    if not rows:
        print("no deliveries")
    return 0


def cmd_deliveries_retry(args: argparse.Namespace, settings: Settings) -> int:
    result = _intake(settings).retry(args.delivery)
    print(f"{result.status_code} {result.message}")
    if result.jobs:
        print(f"{len(result.jobs)} job(s) recorded; a running worker's relay dispatches them")
    return 0 if result.status_code < 400 else 1


def cmd_evidence_get(args: argparse.Namespace, settings: Settings) -> int:
    from app.evidence import EvidenceError, open_evidence_store

    store = open_evidence_store(settings, make_engine(settings.database_url))
    try:
        data = store.get(args.sha256)
    except (EvidenceError, ValueError) as exc:
        print(f"cannot read evidence {args.sha256}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def cmd_evidence_collect(args: argparse.Namespace, settings: Settings) -> int:
    from app.evidence.collect import collect_unreferenced

    retention = settings.evidence_retention
    if args.retention_days is not None:
        retention = args.retention_days * 86400
    report = collect_unreferenced(make_engine(settings.database_url), retention=retention)
    print(
        f"{report.candidates} artifact(s) past retention, {report.referenced} still referenced, "
        f"{report.deleted} deleted ({report.bytes_freed} bytes stored)"
    )
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from app.demo.run import run_demo

    return asyncio.run(
        run_demo(
            crash=args.crash,
            keep=args.dir,
            seed=args.seed,
            timeout=args.timeout,
            agent=args.agent,
        )
    )


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from app.worker import run_worker

    return asyncio.run(run_worker(settings))


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    parser = argparse.ArgumentParser(
        prog="repairbot", description="Coding-agent bug repairs as durable workflows."
    )
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Command] = {}

    def add(name: str, fn: Command, help_: str) -> argparse.ArgumentParser:
        handlers[name] = fn
        return sub.add_parser(name, help=help_)

    add("migrate", cmd_migrate, "apply database migrations")
    demo = add("demo", cmd_demo, "the whole repair on an emulated GitHub, end to end")
    demo.add_argument("--crash", action="store_true", help="SIGKILL the worker mid-run")
    demo.add_argument("--dir", type=Path, help="keep everything in this folder")
    demo.add_argument("--seed", type=int, help="seed for the crash moment")
    demo.add_argument("--timeout", type=float, default=180.0)
    demo.add_argument(
        "--agent",
        choices=("command", "builtin"),
        default="command",
        help="the demo's command agent, or the built-in agent loop with a scripted model",
    )
    example = add("example", cmd_example, "run a small durable workflow end to end")
    example.add_argument("items", nargs="*", default=["durable", "replayed", "fenced"])
    add("worker", cmd_worker, "run a worker (arq over Redis if REDIS_URL is set)")
    for name, fn, help_ in (
        ("web", cmd_web, "serve webhooks, API and dashboard (workers run elsewhere)"),
        ("serve", cmd_serve, "web and an in-process worker in one process (embedded mode)"),
    ):
        p = add(name, fn, help_)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=8000)
    deliveries = add("deliveries", lambda a, s: 0, "inspect and retry webhook deliveries")
    deliveries_sub = deliveries.add_subparsers(dest="deliveries_command", required=True)
    dl = deliveries_sub.add_parser("list", help="recent deliveries")
    dl.add_argument("--status", help="handled, ignored, failed or malformed")
    dl.add_argument("--limit", type=int, default=50)
    handlers["deliveries list"] = cmd_deliveries_list
    dr = deliveries_sub.add_parser("retry", help="run a recorded delivery's handlers again")
    dr.add_argument("delivery")
    handlers["deliveries retry"] = cmd_deliveries_retry
    evidence = add("evidence", lambda a, s: 0, "read and collect evidence in the database")
    evidence_sub = evidence.add_subparsers(dest="evidence_command", required=True)
    eg = evidence_sub.add_parser("get", help="write an artifact's bytes to stdout")
    eg.add_argument("sha256")
    handlers["evidence get"] = cmd_evidence_get
    ec = evidence_sub.add_parser(
        "collect", help="delete artifacts no run refers to, once past their retention"
    )
    ec.add_argument(
        "--retention-days", type=float, help="override REPAIRBOT_EVIDENCE_RETENTION_DAYS"
    )
    handlers["evidence collect"] = cmd_evidence_collect
    runs = add("runs", lambda a, s: 0, "inspect runs")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    lst = runs_sub.add_parser("list", help="recent runs")
    lst.add_argument("--limit", type=int, default=30)
    lst.add_argument("--status")
    handlers["runs list"] = cmd_runs_list
    for name, fn, help_ in (
        ("show", cmd_runs_show, "a run's phase, history and attempts"),
        ("export", cmd_runs_export, "a run's history as JSON (for tests/histories/)"),
    ):
        p = runs_sub.add_parser(name, help=help_)
        p.add_argument("run", help="run id or workflow id")
        handlers[f"runs {name}"] = fn
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    key = args.command
    sub_command: Any = getattr(args, f"{args.command}_command", None)
    if sub_command:
        key = f"{key} {sub_command}"
    try:
        return handlers[key](args, settings)
    except BrokenPipeError:
        # Output piped into `head` and cut short: not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
