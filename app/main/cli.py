"""The ``repairbot`` command."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app import logs, secrets
from app.config import ConfigError, Settings
from app.engine.db import make_engine
from app.engine.history import export_history
from app.engine.store import Store
from app.migrate import upgrade

#: What a CLI verb runs (``repairbot runs list`` -> ``cmd_runs_list``); exit status out.
Subcommand = Callable[[argparse.Namespace, Settings], int]


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
    from app.engine.client import RuntimeClient
    from app.main.catalog import build_registry

    if run.status not in ("running", "cancelling"):
        return None
    runtime = RuntimeClient(make_engine(settings.database_url), build_registry())
    try:
        answer = runtime.query(run.run_id, "status")
    except (KeyError, LookupError):
        return None
    return answer if isinstance(answer, dict) else None


def cmd_runs_export(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(export_history(_store(settings), args.run), indent=1))
    return 0


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (containers)
        return f"uid:{os.getuid()}"


async def _run_action(args: argparse.Namespace, settings: Settings) -> int:
    from app.engine.client import RuntimeClient
    from app.main.catalog import build_registry
    from app.run_actions import NotRetryable, RunNotFound, retry_run

    runtime = RuntimeClient(make_engine(settings.database_url), build_registry())
    pool = None
    if settings.redis_url:
        # Prompt pickup; without Redis the outbox rows wait for a worker's relay.
        from app.engine.arq_dispatch import ArqDispatcher
        from app.engine.redis_channel import connect

        pool = await connect(settings.redis_url)
        runtime.use_dispatcher(ArqDispatcher(pool))
    action, key, reason, by = args.runs_command, args.run, args.reason, args.by
    try:
        if action == "retry":
            try:
                new = await retry_run(runtime, key, reason=reason, by=by)
            except (RunNotFound, NotRetryable) as exc:
                print(f"cannot retry: {exc}", file=sys.stderr)
                return 1
            print(f"started {new} (retry of {key}, by {by}: {reason})")
            return 0
        if action == "terminate":
            record = await runtime.terminate(key, reason, by=by)
            if record is None:
                print(f"no open or parked run for {key!r}", file=sys.stderr)
                return 1
            print(f"terminated {key} (by {by}: {reason})")
            for item in record["uncertain"]:
                print(f"  uncertain: {item['operation_id']} ({item['status']}, {item['effect']})")
            return 0
        done = await (runtime.cancel if action == "cancel" else runtime.resume)(key, reason, by=by)
        if not done:
            wanted = "open or parked" if action == "cancel" else "parked"
            print(f"no {wanted} run for {key!r}", file=sys.stderr)
            return 1
        print(f"{'cancel requested for' if action == 'cancel' else 'resumed'} {key} (by {by})")
        return 0
    finally:
        if pool is not None:
            await pool.aclose()


def cmd_runs_action(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run_action(args, settings))


def cmd_example(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.example_run import run_example

    return asyncio.run(run_example(settings, items=args.items))


def cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.web_process import run_web

    return asyncio.run(run_web(settings, host=args.host, port=args.port, with_worker=False))


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.web_process import run_web

    return asyncio.run(run_web(settings, host=args.host, port=args.port, with_worker=True))


def _intake(settings: Settings) -> Any:
    from app.intake import Intake
    from app.main.catalog import build_registry
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


def cmd_runs_watch(args: argparse.Namespace, settings: Settings) -> int:
    from app.engine.client import RuntimeClient
    from app.main.catalog import build_registry
    from app.watch import watch

    runtime = RuntimeClient(make_engine(settings.database_url), build_registry())
    try:
        return watch(runtime, args.run, interval=args.interval, timeout=args.timeout)
    except KeyboardInterrupt:
        return 130


def cmd_tokens_create(args: argparse.Namespace, settings: Settings) -> int:
    from app.api_tokens import TokenError, create_token

    try:
        token = create_token(_store(settings), args.name, set(args.scope or ["read"]))
    except TokenError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(token)
    print(
        f"token {args.name!r} created; it is shown only now (send it as "
        "'Authorization: Bearer <token>')",
        file=sys.stderr,
    )
    return 0


def cmd_tokens_list(args: argparse.Namespace, settings: Settings) -> int:
    from app.api_tokens import list_tokens

    for t in list_tokens(_store(settings)):
        state = f"revoked {_when(t.revoked_at)}" if t.revoked_at else "active"
        print(
            f"{t.name:24} {' '.join(sorted(t.scopes)):18} created {_when(t.created_at)}  "
            f"last used {_when(t.last_used_at)}  {state}"
        )
    return 0


def cmd_tokens_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from app.api_tokens import revoke_token

    if revoke_token(_store(settings), args.name):
        print(f"token {args.name!r} revoked")
        return 0
    print(f"no active token named {args.name!r}", file=sys.stderr)
    return 1


def cmd_register(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.web_process import serve_registration
    from app.registration import Registrar
    from handlers import build_router

    public_url = (args.public_url or settings.public_url).rstrip("/")
    if not public_url:
        print("give --public-url (where GitHub will reach repairbot)", file=sys.stderr)
        return 2
    out = args.out or settings.app_file or settings.data_dir / "github-app.json"
    registrar = Registrar(
        name=args.name,
        public_url=public_url,
        own_url=f"http://{args.host}:{args.port}",
        github_web_url=settings.github_web_url,
        github_api_url=settings.github_api_url,
        out=out,
        routed=frozenset(build_router().keys),
        workflows=args.workflows or settings.workflows_permission,
        org=args.org or "",
        force=args.force,
    )
    if out.exists() and not args.force:
        print(f"{out} exists; pass --force to replace it", file=sys.stderr)
        return 1
    print(f"open http://{args.host}:{args.port}/ in a browser to register the App")
    asyncio.run(serve_registration(registrar, host=args.host, port=args.port))
    if registrar.registered is None:
        return 1
    print(f"registered {registrar.registered['slug']} (id {registrar.registered['app_id']})")
    print(f"credentials written to {out} (mode 600)")
    print(f"install it: {registrar.registered['html_url']}/installations/new")
    return 0


def cmd_deliveries_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from app.delivery_reconciler import pending_redeliveries
    from app.main.worker_process import delivery_reconciler

    if not settings.github_app_id:
        print("GITHUB_APP_ID is not set: nothing to reconcile against", file=sys.stderr)
        return 2
    interval = args.interval or settings.delivery_reconcile_interval or 60.0
    reconciler = delivery_reconciler(settings.with_overrides(delivery_reconcile_interval=interval))
    assert reconciler is not None
    report = asyncio.run(reconciler.run_once())
    print(report.summary())
    for row in pending_redeliveries(reconciler.engine):
        if row.state != "recorded":
            action = f".{row.action}" if row.action else ""
            print(
                f"{row.guid:38} {row.event + action:34} {row.state:8} asked {row.requests}x  "
                f"{row.detail or ''}"
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
    from app.main.worker_process import run_worker

    return asyncio.run(run_worker(settings))


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Subcommand]]:
    parser = argparse.ArgumentParser(
        prog="repairbot", description="Coding-agent bug repairs as durable workflows."
    )
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        default="json",
        help="json: one object per line, with run and delivery ids (default); text: for reading",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Subcommand] = {}

    def add(name: str, fn: Subcommand, help_: str) -> argparse.ArgumentParser:
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
    tokens = add("tokens", lambda a, s: 0, "operator API tokens (automation, /metrics)")
    tokens_sub = tokens.add_subparsers(dest="tokens_command", required=True)
    tc = tokens_sub.add_parser("create", help="make a token (printed once)")
    tc.add_argument("name")
    tc.add_argument(
        "--scope",
        action="append",
        choices=["read", "act", "metrics"],
        help="read (default), act (run actions), metrics; repeat for several",
    )
    handlers["tokens create"] = cmd_tokens_create
    tokens_sub.add_parser("list", help="tokens and when they were last used")
    handlers["tokens list"] = cmd_tokens_list
    tr = tokens_sub.add_parser("revoke", help="revoke a token by name")
    tr.add_argument("name")
    handlers["tokens revoke"] = cmd_tokens_revoke
    reg = add("register", cmd_register, "create the GitHub App from a manifest")
    reg.add_argument("--public-url", help="where GitHub and people reach repairbot")
    reg.add_argument("--name", default="repairbot", help="the App's name (must be unique)")
    reg.add_argument("--org", help="register for this organization (default: your account)")
    reg.add_argument("--workflows", action="store_true", help="ask for the Workflows permission")
    reg.add_argument("--out", type=Path, help="credentials file (default <data>/github-app.json)")
    reg.add_argument("--force", action="store_true", help="replace an existing credentials file")
    reg.add_argument("--host", default="127.0.0.1")
    reg.add_argument("--port", type=int, default=8765)
    dc = deliveries_sub.add_parser(
        "reconcile",
        help="one pass of the delivery reconciler: have GitHub redeliver what never arrived",
    )
    dc.add_argument(
        "--interval",
        type=float,
        help="seconds since the last request for a delivery before asking again "
        "(default: REPAIRBOT_DELIVERY_RECONCILE_INTERVAL)",
    )
    handlers["deliveries reconcile"] = cmd_deliveries_reconcile
    runs = add("runs", lambda a, s: 0, "inspect runs")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    lst = runs_sub.add_parser("list", help="recent runs")
    lst.add_argument("--limit", type=int, default=30)
    lst.add_argument("--status")
    handlers["runs list"] = cmd_runs_list
    for name, fn, help_ in (
        ("show", cmd_runs_show, "a run's phase, history and attempts"),
        ("export", cmd_runs_export, "a run's history as JSON (for tests/histories/)"),
        ("watch", cmd_runs_watch, "follow a run live until it ends"),
    ):
        p = runs_sub.add_parser(name, help=help_)
        p.add_argument("run", help="run id or workflow id")
        handlers[f"runs {name}"] = fn
        if name == "watch":
            p.add_argument("--interval", type=float, default=0.5, help="seconds between looks")
            p.add_argument("--timeout", type=float, help="stop watching after this many seconds")
    for name, help_ in (
        ("cancel", "ask a run to cancel (it cleans up what it owns)"),
        ("terminate", "end a run now without running its code"),
        ("resume", "continue a run parked in needs-human or blocked-nondeterministic"),
        ("retry", "start a new run for a closed run's request"),
    ):
        p = runs_sub.add_parser(name, help=help_)
        p.add_argument("run", help="run id or workflow id")
        p.add_argument("--reason", required=True, help="recorded in the run's history")
        p.add_argument("--by", default=_operator(), help="who acts (default: the OS user)")
        handlers[f"runs {name}"] = cmd_runs_action
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, json_lines=args.log_format == "json")
    try:
        # Secrets are read once (from the environment, or a descriptor the
        # starting process handed over), then scrubbed from this process.
        handed_over = secrets.receive(os.environ)
        settings = Settings.from_env({**os.environ, **handed_over})
    except (ConfigError, secrets.SecretsError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command in ("web", "serve", "worker") and not os.environ.get(
        "PROMETHEUS_MULTIPROC_DIR"
    ):
        # Every process of this deployment writes its metric files here and
        # /metrics merges them (prometheus_client's multiprocess mode). Set
        # before anything imports prometheus_client.
        from app.metrics import use_multiprocess_dir

        use_multiprocess_dir(settings.data_dir / "metrics")
    secrets.lock_down(os.environ, settings.secret_names())
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
    finally:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from app.metrics import process_exited

            process_exited()


if __name__ == "__main__":
    sys.exit(main())
