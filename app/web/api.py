"""The JSON API (``/api/...``): the same data and rules as the dashboard, for
automation holding an operator token (or a signed-in browser)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine import RuntimeClient
from app.operations.runs_view import RunFilters, RunSummary, list_runs, run_detail
from app.web import actions
from app.web.access import Principal
from app.web.guard import Guard


def _summary_json(s: RunSummary) -> dict[str, Any]:
    run = s.run
    return {
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "workflow": f"{run.workflow_name}@{run.workflow_version}",
        "repository": s.repo,
        "issue_number": s.issue_number,
        "status": run.status,
        "phase": s.phase or None,
        "outcome": s.outcome or None,
        "history_length": run.history_length,
        "created_at": run.created_at,
        "closed_at": run.closed_at,
    }


def _json(body: Any, status: int = 200) -> Response:
    return JSONResponse(json.loads(json.dumps(body, default=str)), status_code=status)


class Api:
    def __init__(self, runtime: RuntimeClient, guard: Guard) -> None:
        self.runtime = runtime
        self.guard = guard

    async def runs(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        try:
            page = max(1, int(q.get("page", "1")))
        except ValueError:
            return _json({"message": "page must be a number"}, 422)
        filters = RunFilters(
            repo=q.get("repo", ""),
            status=q.get("status", ""),
            phase=q.get("phase", ""),
            outcome=q.get("outcome", ""),
            page=page,
        )
        found, total = await asyncio.to_thread(
            list_runs, self.runtime, filters, principal.visible()
        )
        return _json({"total": total, "page": page, "runs": [_summary_json(s) for s in found]})

    async def run(self, request: Request, principal: Principal) -> Response:
        run = await asyncio.to_thread(self.runtime.store.find_run, request.path_params["run_id"])
        if run is None or not principal.may_read_run(run):
            return _json({"message": "Not Found"}, 404)
        d = await asyncio.to_thread(run_detail, self.runtime, run)
        body = _summary_json(d.summary) | {
            "state": d.state,
            "error": run.error,
            "timeline": [
                {"phase": p.phase, "started_at": p.started_at, "ended_at": p.ended_at}
                for p in d.timeline
            ],
            "attempts": [vars(a) for a in d.attempts],
            "agent_tokens": {"input": d.tokens[0], "output": d.tokens[1]},
            "agent_cost_usd": d.cost_usd,
            "events": d.events,
            "actions": actions.available(run) if principal.may_act_on_run(run) else [],
        }
        return _json(body)

    async def act(self, request: Request, principal: Principal) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _json({"message": "Problems parsing JSON"}, 400)
        if not isinstance(body, dict):
            return _json({"message": "Problems parsing JSON"}, 400)
        if not self.guard.csrf_ok(request, principal, None):
            return _json({"message": "missing or wrong X-CSRF-Token"}, 403)
        run = await asyncio.to_thread(self.runtime.store.find_run, request.path_params["run_id"])
        if run is None or not principal.may_read_run(run):
            return _json({"message": "Not Found"}, 404)
        if not principal.may_act_on_run(run):
            return _json({"message": "actions need write access to the repository"}, 403)
        reason = str(body.get("reason") or "").strip()
        if not reason:
            return _json({"message": "reason is required"}, 422)
        try:
            result = await actions.perform(
                self.runtime,
                run,
                request.path_params["action"],
                reason=reason[:500],
                by=principal.actor,
            )
        except actions.ActionUnavailable as exc:
            return _json({"message": str(exc)}, 409)
        return _json(vars(result), 202 if result.ok else 409)
