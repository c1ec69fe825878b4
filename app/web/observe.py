"""``/healthz``, ``/metrics`` (Prometheus text), the JSON API and the dashboard."""

from __future__ import annotations

import asyncio
import html
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from app.engine.runtime import Runtime
from app.engine.store import STALE_WRITES, RunRow
from app.engine.store.schema import outbox, runs
from app.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceStore
from app.tables import WebhookDelivery
from app.web.limits import BodyGate

Endpoint = Callable[[Request], Awaitable[Response]]
deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]
log = logging.getLogger("repairbot.web")
#: A database that does not answer within this long counts as down (a
#: black-holed host would otherwise hold the probe for the TCP timeout).
HEALTH_TIMEOUT = 5.0


def _run_json(run: RunRow) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "workflow": f"{run.workflow_name}@{run.workflow_version}",
        "status": run.status,
        "cancel_phase": run.cancel_phase,
        "history_length": run.history_length,
        "result": run.result,
        "error": run.error,
        "created_at": run.created_at,
        "closed_at": run.closed_at,
    }


def health_endpoint(runtime: Runtime) -> Endpoint:
    def ping() -> None:
        with runtime.engine.connect() as conn:
            conn.execute(text("select 1"))

    async def healthz(request: Request) -> Response:
        try:
            # Off the event loop: a database that hangs must not stall webhooks.
            await asyncio.wait_for(asyncio.to_thread(ping), HEALTH_TIMEOUT)
        except Exception:
            # The detail (host names, driver messages) goes to the log, never to
            # the public port.
            log.warning("health check: database unreachable", exc_info=True)
            return JSONResponse({"ok": False}, status_code=503)
        return JSONResponse({"ok": True})

    return healthz


def metrics_endpoint(runtime: Runtime, gate: BodyGate | None = None) -> Endpoint:
    async def metrics(request: Request) -> Response:
        with runtime.engine.connect() as conn:
            by_status = conn.execute(
                select(runs.c.status, func.count()).group_by(runs.c.status)
            ).all()
            delivered = conn.execute(
                select(deliveries.c.status, func.count()).group_by(deliveries.c.status)
            ).all()
            depth = conn.execute(select(func.count()).select_from(outbox)).scalar_one()
        lines = [
            "# HELP repairbot_runs Runs by status.",
            "# TYPE repairbot_runs gauge",
            *(f'repairbot_runs{{status="{s}"}} {n}' for s, n in by_status),
            "# HELP repairbot_webhook_deliveries Recorded deliveries by status.",
            "# TYPE repairbot_webhook_deliveries gauge",
            *(f'repairbot_webhook_deliveries{{status="{s}"}} {n}' for s, n in delivered),
            "# HELP repairbot_outbox_depth Jobs written but not yet consumed.",
            "# TYPE repairbot_outbox_depth gauge",
            f"repairbot_outbox_depth {depth}",
            "# HELP repairbot_stale_writes_rejected_total Writes refused: stale fencing token.",
            "# TYPE repairbot_stale_writes_rejected_total counter",
            f"repairbot_stale_writes_rejected_total {runtime.store.counter(STALE_WRITES)}",
        ]
        if gate is not None:
            lines += [
                "# HELP repairbot_webhook_bytes_in_flight Webhook body bytes held right now.",
                "# TYPE repairbot_webhook_bytes_in_flight gauge",
                f"repairbot_webhook_bytes_in_flight {gate.in_flight}",
                "# HELP repairbot_webhook_refused_total Webhook bodies refused by a limit.",
                "# TYPE repairbot_webhook_refused_total counter",
                *(
                    f'repairbot_webhook_refused_total{{status="{code}"}} {n}'
                    for code, n in sorted(gate.refused.items())
                ),
            ]
        return PlainTextResponse("\n".join(lines) + "\n")

    return metrics


def runs_api(runtime: Runtime) -> Endpoint:
    async def list_runs(request: Request) -> Response:
        status = request.query_params.get("status")
        found = runtime.store.list_runs(limit=100, status=status)
        return JSONResponse([_run_json(r) for r in found])

    return list_runs


def run_api(runtime: Runtime) -> Endpoint:
    async def show_run(request: Request) -> Response:
        run = runtime.store.find_run(request.path_params["run_id"])
        if run is None:
            return JSONResponse({"message": "no such run"}, status_code=404)
        body = _run_json(run) | {
            "events": [e.to_json() for e in runtime.store.load_events(run.run_id)],
            "attempts": runtime.store.activity_attempts(run.run_id),
        }
        return JSONResponse(json.loads(json.dumps(body, default=str)))

    return show_run


def evidence_api(store: EvidenceStore) -> Endpoint:
    """``GET /api/evidence/{sha256}``: an artifact's bytes, checked against its hash.

    Served as text when it decodes as UTF-8, else as bytes; never rendered as
    HTML (repository output is hostile).
    """

    async def show_evidence(request: Request) -> Response:
        sha = request.path_params["sha256"]
        try:
            data = await asyncio.to_thread(store.get, sha)
        except ValueError:
            return JSONResponse({"message": "not a sha256 hex digest"}, status_code=400)
        except EvidenceMissing:
            return JSONResponse({"message": "no such evidence"}, status_code=404)
        except EvidenceCorrupt as exc:
            return JSONResponse({"message": str(exc)}, status_code=500)
        try:
            data.decode()
            media_type = "text/plain; charset=utf-8"
        except UnicodeDecodeError:
            media_type = "application/octet-stream"
        headers = {"X-Content-Type-Options": "nosniff", "ETag": f'"{sha}"'}
        return Response(data, media_type=media_type, headers=headers)

    return show_evidence


def _when(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def dashboard(runtime: Runtime) -> Endpoint:
    async def page(request: Request) -> Response:
        rows = []
        for run in runtime.store.list_runs(limit=100):
            phase = run.cancel_phase or ""
            link = f"/api/runs/{html.escape(run.run_id).replace('#', '%23')}"
            rows.append(
                f"<tr class='{html.escape(run.status)}'><td><a href='{link}'>"
                f"{html.escape(run.run_id)}</a></td><td>{html.escape(run.workflow_name)}</td>"
                f"<td>{html.escape(run.status)}</td><td>{html.escape(phase)}</td>"
                f"<td>{run.history_length}</td><td>{_when(run.created_at)}</td>"
                f"<td>{_when(run.closed_at)}</td></tr>"
            )
        body = (
            "<!doctype html><html><head><meta charset='utf-8'><title>repairbot</title>"
            "<meta http-equiv='refresh' content='3'>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 10px;"
            "text-align:left}tr.failed,tr.needs-human,tr.blocked-nondeterministic"
            "{background:#fdd}tr.completed{background:#dfd}</style></head><body>"
            "<h1>repairbot runs</h1><table><tr><th>run</th><th>workflow</th><th>status</th>"
            "<th>phase</th><th>events</th><th>started (UTC)</th><th>closed</th></tr>"
            + "".join(rows)
            + "</table></body></html>"
        )
        return HTMLResponse(body)

    return page
