"""The dashboard's HTML pages (Jinja2, server-rendered; readable without
JavaScript). Every handler gets the caller's principal from the guard and
shows only runs of repositories that principal may read."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from app.config import Settings
from app.engine import CLOSED_STATUSES, OPEN_STATUSES, PARKED_STATUSES, RunRow, RuntimeClient
from app.evidence import EvidenceError, open_evidence_store
from app.intake.pipeline import Intake
from app.operations.runs_view import (
    PER_PAGE,
    RunFilters,
    known_repositories,
    list_runs,
    run_detail,
)
from app.web import actions, deliveries_view
from app.web.access import Principal
from app.web.evidence_view import listed, shown
from app.web.guard import Guard
from app.workflows.report import OUTCOMES, PHASES

TEMPLATES = Path(__file__).parent / "templates"
STATUSES = sorted({*OPEN_STATUSES, *CLOSED_STATUSES, *PARKED_STATUSES, "terminated"})


def when(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def run_url(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


def short_json(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 300 else text[:300] + "…"


def next_step(run: RunRow, summary: Any, pull_number: Any) -> str:
    """What the run waits for from a person, in one sentence."""
    if run.status in PARKED_STATUSES:
        return "A person: fix the cause (see Error), then Resume the run, or Cancel or Terminate."
    if run.status in CLOSED_STATUSES:
        if summary.outcome == "merged":
            return "Nothing: the fix is merged."
        return "Nothing, unless you want another try: Retry starts a new run for this issue."
    if summary.phase == "awaiting-review" and pull_number:
        return (
            f"Your review of pull request #{pull_number}: approving its commit lets repairbot "
            "merge it; requesting changes starts another attempt."
        )
    return "Nothing yet: repairbot is working; this page follows it."


def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(TEMPLATES))
    t.env.globals.update(when=when, duration=duration, run_url=run_url, short_json=short_json)
    return t


def int_param(request: Request, name: str, default: int) -> int:
    try:
        return max(1, int(request.query_params.get(name, default)))
    except ValueError:
        return default


class Pages:
    def __init__(
        self, settings: Settings, runtime: RuntimeClient, intake: Intake, guard: Guard
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.intake = intake
        self.guard = guard
        self.evidence = open_evidence_store(settings, runtime.engine)
        self.templates = templates()

    def render(
        self, request: Request, name: str, principal: Principal | None, **context: Any
    ) -> Response:
        context |= {"principal": principal, "notice": self.notice_of(request, principal)}
        return self.templates.TemplateResponse(
            request, name, context, status_code=context.pop("status_code", 200)
        )

    # -- notices: what an action did, shown on the page it redirects to ---------
    #
    # The text travels in the redirect's query string, so a link anyone can
    # make would put any words on our page. Only a notice signed by this
    # server, for the person who acted, is shown.

    def _notice_sig(self, principal: Principal, text: str) -> str:
        key = b"repairbot-notice\0" + self.settings.session_secret.encode()
        message = f"{principal.name}\0{text}".encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()

    def notice_url(self, path: str, principal: Principal, text: str) -> str:
        return f"{path}?{urlencode({'notice': text, 'sig': self._notice_sig(principal, text)})}"

    def notice_of(self, request: Request, principal: Principal | None) -> str | None:
        text, sig = request.query_params.get("notice"), request.query_params.get("sig")
        if not text or not sig or principal is None:
            return None
        return text if hmac.compare_digest(sig, self._notice_sig(principal, text)) else None

    def message(
        self, request: Request, principal: Principal | None, heading: str, text: str, status: int
    ) -> Response:
        return self.render(
            request, "message.html", principal, heading=heading, text=text, status_code=status
        )

    # -- runs ------------------------------------------------------------------

    async def runs(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        filters = RunFilters(
            repo=q.get("repo", ""),
            status=q.get("status", ""),
            phase=q.get("phase", ""),
            outcome=q.get("outcome", ""),
            page=int_param(request, "page", 1),
        )
        visible = principal.visible()
        found, total = await asyncio.to_thread(list_runs, self.runtime, filters, visible)
        repositories = await asyncio.to_thread(known_repositories, self.runtime, visible)

        def page_url(page: int) -> str:
            kept = {k: v for k, v in q.items() if v and k != "page"}
            return "/runs?" + urlencode(kept | {"page": str(page)})

        return self.render(
            request,
            "runs.html",
            principal,
            nav="runs",
            runs=found,
            total=total,
            pages=max(1, math.ceil(total / PER_PAGE)),
            filters=filters,
            repositories=repositories,
            statuses=STATUSES,
            phases=[p for p, _ in PHASES] + ["cancel-requested", "stopping-active-work"],
            outcomes=sorted(OUTCOMES),
            page_url=page_url,
            github_web=self.settings.github_web_url,
        )

    async def readable_run(self, request: Request, principal: Principal) -> RunRow | None:
        run = await asyncio.to_thread(self.runtime.store.find_run, request.path_params["run_id"])
        # A run the caller may not read is "not found", as GitHub does.
        return run if run is not None and principal.may_read_run(run) else None

    async def run(self, request: Request, principal: Principal) -> Response:
        run = await self.readable_run(request, principal)
        if run is None:
            return self.message(request, principal, "Not found", "No such run.", 404)
        detail = await asyncio.to_thread(run_detail, self.runtime, run)
        state = detail.state
        budgets = (state.get("contract") or {}).get("budgets") or {}
        evidence = [shown(self.evidence, item) for item in detail.evidence]
        cost = detail.cost_usd
        repo = detail.summary.repo
        web = self.settings.github_web_url
        pull_number = state.get("pull_number")
        return self.render(
            request,
            "run.html",
            principal,
            nav="runs",
            run=run,
            detail=detail,
            budgets=budgets,
            elapsed=(run.closed_at or time.time()) - run.created_at,
            cost=f"${cost:.4f}" if cost else "not priced (set REPAIRBOT_AGENT_PRICES)",
            approval=state.get("approval"),
            evidence=evidence,
            issue_url=(
                f"{web}/{repo}/issues/{detail.summary.issue_number}"
                if repo and detail.summary.issue_number
                else None
            ),
            pull_number=pull_number,
            pull_url=state.get("pull_url")
            or (f"{web}/{repo}/pull/{pull_number}" if repo and pull_number else None),
            actions=actions.available(run),
            next_step=next_step(run, detail.summary, pull_number),
            can_act=principal.may_act_on_run(run),
            csrf=principal.session.csrf if principal.session else "",
            live_url=run_url(run.run_id) + "/live",
        )

    async def evidence_raw(self, request: Request, principal: Principal) -> Response:
        run = await self.readable_run(request, principal)
        sha = request.path_params["sha"]
        if run is None:
            return PlainTextResponse("no such run", status_code=404)
        detail = await asyncio.to_thread(run_detail, self.runtime, run)
        if not listed(detail.evidence, sha):
            return PlainTextResponse("no such evidence in this run", status_code=404)
        try:
            data = await asyncio.to_thread(self.evidence.get, sha)
        except EvidenceError as exc:
            return PlainTextResponse(str(exc), status_code=410)
        # Served as text whatever it holds: repository output must never run as a page.
        return Response(
            data,
            media_type="text/plain; charset=utf-8",
            headers={"x-content-type-options": "nosniff", "content-disposition": "inline"},
        )

    async def act(self, request: Request, principal: Principal) -> Response:
        form = await request.form()
        csrf, action, reason = (form.get(k) for k in ("csrf", "action", "reason"))
        if not self.guard.csrf_ok(request, principal, csrf if isinstance(csrf, str) else None):
            return self.message(request, principal, "Refused", "Missing or wrong CSRF token.", 403)
        run = await self.readable_run(request, principal)
        if run is None:
            return self.message(request, principal, "Not found", "No such run.", 404)
        if not principal.may_act_on_run(run):
            return self.message(
                request, principal, "Refused", "Actions need write access to the repository.", 403
            )
        if not isinstance(reason, str) or not reason.strip():
            return self.message(request, principal, "Refused", "Give a reason.", 400)
        try:
            result = await actions.perform(
                self.runtime, run, str(action), reason=reason[:500], by=principal.actor
            )
        except actions.ActionUnavailable as exc:
            return self.message(request, principal, "Not possible", str(exc), 409)
        target = run_url(result.new_run_id or run.run_id)
        notice = f"{result.action}: {result.message}"
        return RedirectResponse(self.notice_url(target, principal, notice), status_code=303)

    # -- deliveries ------------------------------------------------------------

    async def deliveries(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        status, event, hide_own = q.get("status", ""), q.get("event", ""), bool(q.get("hide_own"))
        bot = f"{self.settings.github_app_slug}[bot]"
        rows = await asyncio.to_thread(
            lambda: deliveries_view.recent(
                self.runtime.store,
                principal,
                status=status,
                event=event,
                hide_sender=bot if hide_own else "",
            )
        )
        events = await asyncio.to_thread(deliveries_view.recorded_events, self.runtime.store)
        return self.render(
            request,
            "deliveries.html",
            principal,
            nav="deliveries",
            rows=rows,
            status=status,
            event=event,
            events=events,
            hide_own=hide_own,
            bot=bot,
            csrf=principal.session.csrf if principal.session else "",
        )

    async def rerun_delivery(self, request: Request, principal: Principal) -> Response:
        form = await request.form()
        csrf = form.get("csrf")
        if not self.guard.csrf_ok(request, principal, csrf if isinstance(csrf, str) else None):
            return self.message(request, principal, "Refused", "Missing or wrong CSRF token.", 403)
        delivery_id = request.path_params["delivery_id"]
        exists, repo = await asyncio.to_thread(
            deliveries_view.repo_of_delivery, self.runtime.store, delivery_id
        )
        if not exists or not principal.may_read(repo):
            return self.message(request, principal, "Not found", "No such delivery.", 404)
        if not principal.may_act(repo):
            return self.message(
                request, principal, "Refused", "Re-runs need write access to the repository.", 403
            )
        result = await asyncio.to_thread(self.intake.retry, delivery_id)
        await self.runtime.dispatch(result.jobs)
        notice = f"delivery {delivery_id}: {result.status_code} {result.message}"
        return RedirectResponse(self.notice_url("/deliveries", principal, notice), status_code=303)
