"""The ``repairbot`` command."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from app import logs, secrets
from app.config import ConfigError, Settings
from app.engine import (
    CLOSED_STATUSES,
    OPEN_STATUSES,
    PARKED_STATUSES,
    Store,
    export_history,
    make_engine,
)
from app.operations.migrate import upgrade
from app.version import package_version

#: What a CLI verb runs (``repairbot runs list`` -> ``cmd_runs_list``); exit status out.
Subcommand = Callable[[argparse.Namespace, Settings], int]


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    upgrade(settings.database_url)
    from app.main.preflight import safe_url

    print(f"database at {safe_url(settings.database_url)} is at the latest schema")
    return 0


def _port(raw: str) -> int:
    """An argparse type: a TCP port one can listen on."""
    try:
        port = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {raw!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {port}")
    return port


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
                print(f"  {key:14} {json.dumps(value, default=str)}")
    elif run.result is not None:
        print(f"result    {json.dumps(run.result, default=str)}")
    if run.error is not None:
        print(f"error     {json.dumps(run.error, default=str)}")
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
        print(f"  {event.seq:>4} {event.type:20} {json.dumps(data, default=str)}")
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
    from app.engine import RuntimeClient
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
    from app.engine import RuntimeClient
    from app.main.catalog import build_registry
    from app.operations.run_actions import NotRetryable, RunNotFound, retry_run

    runtime = RuntimeClient(make_engine(settings.database_url), build_registry())
    pool = None
    if settings.redis_url:
        # Prompt pickup; without Redis the outbox rows wait for a worker's relay.
        from app.engine import ArqDispatcher
        from app.engine import connect_redis as connect

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


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    from app.intake.proxy import ProxyError, check_channel_url
    from app.main.dev import run_dev

    proxy = args.webhook_proxy or settings.webhook_proxy_url
    if proxy:
        try:
            check_channel_url(proxy)
        except ProxyError as exc:
            print(f"repairbot dev: {exc}", file=sys.stderr)
            return 2
    return asyncio.run(run_dev(settings, host=args.host, port=args.port, proxy_url=proxy))


def _intake(settings: Settings) -> Any:
    from app.intake.pipeline import Intake
    from app.main.catalog import build_registry
    from handlers import build_router

    return Intake(_store(settings), build_registry(), build_router(), settings)


def cmd_deliveries_list(args: argparse.Namespace, settings: Settings) -> int:
    from app.intake.deliveries import list_deliveries

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
    from app.engine import RuntimeClient
    from app.main.catalog import build_registry
    from app.operations.watch import watch

    runtime = RuntimeClient(make_engine(settings.database_url), build_registry())
    try:
        return watch(runtime, args.run, interval=args.interval, timeout=args.timeout)
    except KeyboardInterrupt:
        return 130


def cmd_tokens_create(args: argparse.Namespace, settings: Settings) -> int:
    from app.operations.api_tokens import TokenError, create_token

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
    from app.operations.api_tokens import list_tokens

    for t in list_tokens(_store(settings)):
        state = f"revoked {_when(t.revoked_at)}" if t.revoked_at else "active"
        print(
            f"{t.name:24} {' '.join(sorted(t.scopes)):18} created {_when(t.created_at)}  "
            f"last used {_when(t.last_used_at)}  {state}"
        )
    return 0


def cmd_tokens_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from app.operations.api_tokens import revoke_token

    if revoke_token(_store(settings), args.name):
        print(f"token {args.name!r} revoked")
        return 0
    print(f"no active token named {args.name!r}", file=sys.stderr)
    return 1


def _webhook_channel(wanted: str, settings: Settings) -> str:
    """``--webhook-proxy``: a channel URL as given, or ``new`` for a fresh one."""
    from app.intake.proxy import ProxyError, check_channel_url, create_channel

    async def create() -> str:
        async with httpx.AsyncClient() as client:
            return await create_channel(settings.webhook_proxy_service, client)

    try:
        if wanted == "new":
            channel = asyncio.run(create())
            print(f"created the webhook-proxy channel {channel}")
            return channel
        return check_channel_url(wanted)
    except ProxyError as exc:
        raise SystemExit(f"repairbot register: {exc}") from None


def cmd_register(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.web_process import serve_registration
    from app.operations.registration import Registrar
    from handlers import build_router

    channel = _webhook_channel(args.webhook_proxy, settings) if args.webhook_proxy else ""
    public_url = (args.public_url or settings.public_url).rstrip("/")
    if not public_url and channel:
        # Behind a proxy the public URL serves only people on this machine
        # (sign-in's callback, links): the address `repairbot dev` listens on.
        public_url = "http://127.0.0.1:8000"
    if not public_url:
        print(
            "give --public-url (where GitHub will reach repairbot), or --webhook-proxy new "
            "on a machine GitHub cannot reach",
            file=sys.stderr,
        )
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
        webhook_url=channel,
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
    if channel:
        print(f"webhooks go to {channel}; `repairbot dev` receives them from there")
    print(f"install it: {registrar.registered['html_url']}/installations/new")
    return 0


def cmd_deliveries_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    from app.intake.reconciler import pending_redeliveries
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
            serve_after=args.keep,
        )
    )


def cmd_config_check(args: argparse.Namespace, settings: Settings) -> int:
    from app.operations.config_check import check_config, summary
    from app.repo_config import CONFIG_PATH, MAX_CONFIG_BYTES

    path: Path = args.path
    if path.is_dir():
        path = path / CONFIG_PATH
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        text = raw.decode()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"repairbot config check: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    config, problems = check_config(text)
    if config is not None:
        print(summary(config).replace(CONFIG_PATH, str(path), 1))
        return 0
    for problem in problems:
        print(problem.render(str(path)))
    return 1


def cmd_config_init(args: argparse.Namespace, settings: Settings) -> int:
    from app.onboarding.detect import detect, read_checkout, render_config
    from app.operations.config_check import check_config
    from app.repo_config import CONFIG_PATH

    found = detect(*read_checkout(args.path))
    text = render_config(found, trigger_label=settings.trigger_label)
    _config, problems = check_config(text)  # what it proposes, the run accepts
    assert not problems, problems
    if not args.write:
        print(text, end="")
        return 0
    target = args.path / CONFIG_PATH
    if target.exists():
        print(f"repairbot config init: {target} exists; not replaced", file=sys.stderr)
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target} ({'; '.join(found.reasons)}); check it")
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from app.main.worker_process import run_worker

    return asyncio.run(run_worker(settings))


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Subcommand]]:
    parser = argparse.ArgumentParser(
        prog="repairbot",
        description="Coding-agent bug repairs as durable workflows.",
        epilog="Settings come from environment variables (README.md, Configuration); "
        "each command's --help names the ones it reads.",
    )
    parser.add_argument("--version", action="version", version=f"repairbot {package_version()}")
    parser.add_argument(
        "--log-level",
        help="debug, info, warning, error or critical, in any case (default: "
        "REPAIRBOT_LOG_LEVEL, else info for web, serve and worker and warning for the rest)",
    )
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        help="json: one object per line, with run and delivery ids; text: for reading "
        "(default: REPAIRBOT_LOG_FORMAT, else json)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error print the traceback, not only its one line (also REPAIRBOT_DEBUG=1)",
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
    demo.add_argument(
        "--keep",
        action="store_true",
        help="after the run, keep the emulated GitHub, repairbot and the worker serving "
        "(until Ctrl-C) and print how to open the dashboard and sign in",
    )
    demo.add_argument("--seed", type=int, help="seed for the crash moment")
    demo.add_argument(
        "--timeout", type=float, default=180.0, help="give up after this many seconds (180)"
    )
    demo.add_argument(
        "--agent",
        choices=("command", "builtin"),
        default="command",
        help="the demo's command agent, or the built-in agent loop with a scripted model",
    )
    example = add("example", cmd_example, "run a small durable workflow end to end")
    example.add_argument(
        "items",
        nargs="*",
        default=["durable", "replayed", "fenced"],
        help="words the workflow surveys in parallel activities",
    )
    add("worker", cmd_worker, "run a worker (arq over Redis if REDIS_URL is set)")
    for name, fn, help_ in (
        ("web", cmd_web, "serve webhooks, API and dashboard (workers run elsewhere)"),
        ("serve", cmd_serve, "web and an in-process worker in one process (embedded mode)"),
    ):
        p = add(name, fn, help_)
        p.add_argument("--host", default="127.0.0.1", help="address to listen on")
        p.add_argument("--port", type=_port, default=8000, help="port to listen on (1-65535)")
    dev = add(
        "dev",
        cmd_dev,
        "serve (web and worker) on this machine, receiving webhooks through a webhook proxy",
    )
    dev.add_argument("--host", default="127.0.0.1", help="address to listen on")
    dev.add_argument("--port", type=_port, default=8000, help="port to listen on (1-65535)")
    dev.add_argument(
        "--webhook-proxy",
        metavar="URL",
        help="the smee-compatible channel GitHub delivers to (default: "
        "REPAIRBOT_WEBHOOK_PROXY_URL, which `register --webhook-proxy` stores); "
        "each delivery is posted, signature intact, to this process's intake",
    )
    deliveries = add("deliveries", lambda a, s: 0, "inspect and retry webhook deliveries")
    deliveries_sub = deliveries.add_subparsers(dest="deliveries_command", required=True)
    dl = deliveries_sub.add_parser("list", help="recent deliveries")
    dl.add_argument(
        "--status",
        choices=("handled", "ignored", "failed", "malformed"),
        help="only deliveries with this outcome",
    )
    dl.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    handlers["deliveries list"] = cmd_deliveries_list
    dr = deliveries_sub.add_parser("retry", help="run a recorded delivery's handlers again")
    dr.add_argument("delivery", help="its X-GitHub-Delivery id (see `deliveries list`)")
    handlers["deliveries retry"] = cmd_deliveries_retry
    evidence = add("evidence", lambda a, s: 0, "read and collect evidence in the database")
    evidence_sub = evidence.add_subparsers(dest="evidence_command", required=True)
    eg = evidence_sub.add_parser("get", help="write an artifact's bytes to stdout")
    eg.add_argument("sha256", help="the artifact's hash (see `runs show`)")
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
    tc.add_argument("name", help="what the token is for, e.g. prometheus or ci")
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
    tr.add_argument("name", help="the name it was created with")
    handlers["tokens revoke"] = cmd_tokens_revoke
    reg = add("register", cmd_register, "create the GitHub App from a manifest")
    reg.add_argument("--public-url", help="where GitHub and people reach repairbot")
    reg.add_argument("--name", default="repairbot", help="the App's name (must be unique)")
    reg.add_argument("--org", help="register for this organization (default: your account)")
    reg.add_argument("--workflows", action="store_true", help="ask for the Workflows permission")
    reg.add_argument("--out", type=Path, help="credentials file (default <data>/github-app.json)")
    reg.add_argument("--force", action="store_true", help="replace an existing credentials file")
    reg.add_argument(
        "--webhook-proxy",
        metavar="URL|new",
        help="deliver webhooks to this smee-compatible channel (`new`: create one at "
        "REPAIRBOT_WEBHOOK_PROXY_SERVICE) for a machine GitHub cannot reach; "
        "`repairbot dev` receives from it",
    )
    reg.add_argument("--host", default="127.0.0.1", help="address of the registration page")
    reg.add_argument("--port", type=_port, default=8765, help="port of the registration page")
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
    config = add("config", lambda a, s: 0, "a repository's .github/repairbot.yml")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    cc = config_sub.add_parser(
        "check", help="validate it with the code a run uses; each problem with its line"
    )
    cc.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=Path("."),
        help="the file, or a checkout holding .github/repairbot.yml (default: .)",
    )
    handlers["config check"] = cmd_config_check
    ci = config_sub.add_parser(
        "init", help="propose one from the checkout's pyproject/tox/package.json/Makefile..."
    )
    ci.add_argument(
        "path", nargs="?", type=Path, default=Path("."), help="the checkout (default: .)"
    )
    ci.add_argument(
        "--write", action="store_true", help="write .github/repairbot.yml (never replaces one)"
    )
    handlers["config init"] = cmd_config_init
    runs = add("runs", lambda a, s: 0, "inspect runs")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    lst = runs_sub.add_parser("list", help="recent runs")
    lst.add_argument("--limit", type=int, default=30, help="at most this many (default 30)")
    lst.add_argument("--status", choices=RUN_STATUSES, help="only runs in this status")
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
    _name_environment(parser)
    return parser, handlers


#: The run statuses ``runs list --status`` accepts.
RUN_STATUSES = (*OPEN_STATUSES, *PARKED_STATUSES, *CLOSED_STATUSES)

_DATABASE = ("REPAIRBOT_DATA_DIR", "DATABASE_URL")
_GITHUB_APP = ("GITHUB_API_URL", "GITHUB_APP_ID", "GITHUB_PRIVATE_KEY", "GITHUB_PRIVATE_KEY_FILE")
_WEB = (
    *_DATABASE,
    "REDIS_URL",
    "GITHUB_WEBHOOK_SECRET (required)",
    *_GITHUB_APP,
    "REPAIRBOT_PUBLIC_URL",
    "GITHUB_CLIENT_ID",
    "GITHUB_CLIENT_SECRET",
    "REPAIRBOT_SESSION_SECRET",
    "REPAIRBOT_WEBHOOK_MAX_BYTES",
    "REPAIRBOT_WEBHOOK_READ_TIMEOUT",
    "REPAIRBOT_WEBHOOK_BYTES_IN_FLIGHT",
    "REPAIRBOT_WEB_SHUTDOWN_GRACE",
)
_WORKER = (
    *_DATABASE,
    "REDIS_URL",
    *_GITHUB_APP,
    "GITHUB_GIT_URL",
    "REPAIRBOT_CONCURRENCY",
    "REPAIRBOT_SANDBOX",
    "REPAIRBOT_AGENT_COMMAND",
    "REPAIRBOT_AGENT_*",
    "REPAIRBOT_DRAIN_GRACE",
    "REPAIRBOT_EVIDENCE_*",
)
#: The environment variables each command reads (README.md, Configuration,
#: says what each means); shown at the end of its --help.
ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "migrate": _DATABASE,
    "demo": (),
    "example": _DATABASE,
    "worker": _WORKER,
    "web": _WEB,
    "serve": (*_WEB, *_WORKER[len(_DATABASE) + 1 :]),
    "dev": (*_WEB, *_WORKER[len(_DATABASE) + 1 :], "REPAIRBOT_WEBHOOK_PROXY_URL"),
    "deliveries list": _DATABASE,
    "deliveries retry": _DATABASE,
    "deliveries reconcile": (*_DATABASE, *_GITHUB_APP, "REPAIRBOT_DELIVERY_RECONCILE_INTERVAL"),
    "evidence get": (*_DATABASE, "REPAIRBOT_EVIDENCE_STORE"),
    "evidence collect": (*_DATABASE, "REPAIRBOT_EVIDENCE_RETENTION_DAYS"),
    "tokens create": _DATABASE,
    "tokens list": _DATABASE,
    "tokens revoke": _DATABASE,
    "register": (
        "REPAIRBOT_PUBLIC_URL",
        "REPAIRBOT_APP_FILE",
        "GITHUB_WEB_URL",
        "GITHUB_API_URL",
        "REPAIRBOT_WORKFLOWS_PERMISSION",
        "REPAIRBOT_WEBHOOK_PROXY_SERVICE",
    ),
    "config check": (),
    "config init": (),
    "runs list": _DATABASE,
    "runs show": _DATABASE,
    "runs export": _DATABASE,
    "runs watch": _DATABASE,
    "runs cancel": (*_DATABASE, "REDIS_URL"),
    "runs terminate": (*_DATABASE, "REDIS_URL"),
    "runs resume": (*_DATABASE, "REDIS_URL"),
    "runs retry": (*_DATABASE, "REDIS_URL"),
}


def leaf_parsers(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Every command that runs something (``runs list``...), by its words."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                key = f"{prefix} {name}".strip()
                found |= leaf_parsers(child, key) or {key: child}
    return found


def _name_environment(parser: argparse.ArgumentParser) -> None:
    for key, child in leaf_parsers(parser).items():
        names = tuple(dict.fromkeys(ENVIRONMENT[key]))
        child.epilog = (
            "environment: " + ", ".join(names) + " (and REPAIRBOT_LOG_LEVEL, REPAIRBOT_LOG_FORMAT)"
            if names
            else "environment: none"
            + (
                " (the demo makes its own emulated GitHub, database and folder)"
                if key == "demo"
                else ""
            )
        )


#: Commands that serve for a long time: their start-up line is logged at INFO.
LONG_RUNNING = frozenset({"web", "serve", "worker", "dev"})
#: Commands that read the database as it is: it must be reachable and migrated.
NEEDS_SCHEMA = frozenset({"web", "worker", "runs", "deliveries", "evidence", "tokens"})
#: Commands that migrate the database themselves: it must be reachable.
MIGRATES = frozenset({"migrate", "serve", "dev", "example"})


def _log_settings(args: argparse.Namespace, env: dict[str, str]) -> tuple[int, bool]:
    """The log level and whether lines are JSON, from the flags or the environment."""
    default = "info" if args.command in LONG_RUNNING else "warning"
    level = logs.parse_level(args.log_level or env.get("REPAIRBOT_LOG_LEVEL") or default)
    log_format = (args.log_format or env.get("REPAIRBOT_LOG_FORMAT") or "json").strip().lower()
    if log_format not in ("json", "text"):
        raise logs.LogLevelError(f"REPAIRBOT_LOG_FORMAT must be json or text; got {log_format!r}")
    return level, log_format == "json"


def _preflight(args: argparse.Namespace, settings: Settings) -> None:
    """What must hold before the command starts (each failure is one line)."""
    from app.main import preflight

    if args.command in ("web", "serve", "dev"):
        preflight.check_webhook_secret(settings)
    if args.command in ("web", "serve", "worker", "dev"):
        preflight.check_app_credentials(settings)
    if args.command in NEEDS_SCHEMA:
        preflight.check_schema(settings)
    elif args.command in MIGRATES:
        preflight.check_reachable(settings)
    if args.command in ("web", "serve", "dev"):
        preflight.check_listen(args.host, args.port)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("REPAIRBOT_DEBUG", "").lower() in ("1", "true", "yes")
    try:
        level, json_lines = _log_settings(args, dict(os.environ))
    except logs.LogLevelError as exc:
        print(f"repairbot: {exc}", file=sys.stderr)
        return 2
    logs.configure(level, json_lines=json_lines)
    if level > logging.DEBUG:
        # Their INFO lines are one per HTTP request or migration step: noise
        # beside repairbot's own (REPAIRBOT_LOG_LEVEL=debug shows them).
        for chatty in ("httpx", "alembic"):
            logging.getLogger(chatty).setLevel(max(level, logging.WARNING))
    try:
        # Secrets are read once (from the environment, or a descriptor the
        # starting process handed over), then scrubbed from this process.
        handed_over = secrets.receive(os.environ)
        settings = Settings.from_env({**os.environ, **handed_over})
    except (ConfigError, secrets.SecretsError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command in LONG_RUNNING and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every process of this deployment writes its metric files here and
        # /metrics merges them (prometheus_client's multiprocess mode). Set
        # before anything imports prometheus_client.
        from app.operations.metrics import use_multiprocess_dir

        use_multiprocess_dir(settings.data_dir / "metrics")
    secrets.lock_down(os.environ, settings.secret_names())
    key = args.command
    sub_command: Any = getattr(args, f"{args.command}_command", None)
    if sub_command:
        key = f"{key} {sub_command}"
    from app.main.preflight import Unready

    try:
        _preflight(args, settings)
        return handlers[key](args, settings)
    except Unready as exc:
        print(f"repairbot {key}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Output piped into `head` and cut short: not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"repairbot {key}: {_one_line(exc)} (--debug prints the traceback)", file=sys.stderr)
        return 1
    finally:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from app.operations.metrics import process_exited

            process_exited()


if __name__ == "__main__":
    sys.exit(main())
