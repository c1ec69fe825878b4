"""Check runs: created and updated by GitHub Apps only, announced to their app."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from emulator.gitview import open_git, pull_git
from emulator.render import checks as render
from emulator.render.base import Json, Urls
from emulator.render.pulls import PullGit
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import CheckRun, PullRequest, Repo, Store

STATUSES = ("queued", "in_progress", "completed")
CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "timed_out",
)


def show(urls: Urls, store: Store, repo: Repo, run: CheckRun) -> Json:
    related: list[tuple[PullRequest, PullGit]] = []
    for pr in repo.pulls():
        if pr.issue.state == "open":
            view = pull_git(repo, pr, mergeable=False)
            if view.head_sha == run.head_sha:
                related.append((pr, view))
    head_branch = related[0][0].head_ref if related else None
    return render.check_run(urls, store, repo, run, related, head_branch)


def _time(raw: Any) -> datetime | None:
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise validation(resource="CheckRun", code="invalid", field="started_at") from None


def _apply(run: CheckRun, body: dict[str, Any], now: datetime) -> None:
    for field in ("name", "details_url", "external_id"):
        if field in body:
            setattr(run, field, body[field])
    if "output" in body and isinstance(body["output"], dict):
        run.output = {k: body["output"].get(k) for k in ("title", "summary", "text")}
    if "started_at" in body:
        run.started_at = _time(body["started_at"])
    status, conclusion = body.get("status"), body.get("conclusion")
    if status is not None and status not in STATUSES:
        raise validation(resource="CheckRun", code="invalid", field="status")
    if conclusion is not None and conclusion not in CONCLUSIONS:
        raise validation(resource="CheckRun", code="invalid", field="conclusion")
    if conclusion is not None:
        status = "completed"  # GitHub: providing a conclusion completes the run
    if status == "completed" and conclusion is None and run.conclusion is None:
        raise ApiError(
            422,
            'Invalid request.\n\nNo subschema in "anyOf" matched.\n"conclusion" wasn\'t supplied.',
        )
    if status is not None:
        run.status = status
    if conclusion is not None:
        run.conclusion = conclusion
    if run.status == "completed":
        run.completed_at = _time(body.get("completed_at")) or run.completed_at or now


def _announce(ctx: Ctx, repo: Repo, run: CheckRun, action: str) -> None:
    urls, store = ctx.emu.webhook_urls(), ctx.emu.store
    body = {"action": action, "check_run": show(urls, store, repo, run)}
    ctx.emu.events.for_repo(repo, "check_run", body, sender=ctx.actor(), only_app=run.app_id)


def _require_app(ctx: Ctx) -> int:
    if ctx.principal.kind != "installation" or ctx.principal.app is None:
        raise ApiError(403, "You must authenticate via a GitHub App.")
    return ctx.principal.app.id


def create_check_run(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="checks", level="write", role="write")
    app_id = _require_app(ctx)
    body, store = ctx.json(), ctx.emu.store
    name, head_sha = body.get("name"), body.get("head_sha")
    if not isinstance(name, str) or not name:
        raise validation(resource="CheckRun", code="missing_field", field="name")
    if not isinstance(head_sha, str) or open_git(repo).resolve(head_sha) != head_sha:
        raise ApiError(422, "No commit found for SHA: " + str(head_sha))
    now = store.now()
    suite = next(
        (
            r.suite_id
            for r in repo.check_runs.values()
            if r.head_sha == head_sha and r.app_id == app_id
        ),
        None,
    ) or store.next_id("check_suite")
    run = CheckRun(
        id=store.next_id("check_run"),
        suite_id=suite,
        app_id=app_id,
        name=name,
        head_sha=head_sha,
        status="queued",
        conclusion=None,
        started_at=now,
        completed_at=None,
        details_url=None,
        external_id=None,
        output={},
    )
    _apply(run, body, now)
    repo.check_runs[run.id] = run
    _announce(ctx, repo, run, "created")
    if run.status == "completed":
        _announce(ctx, repo, run, "completed")
    return Reply(201, show(ctx.urls, store, repo, run))


def _find(ctx: Ctx, repo: Repo) -> CheckRun:
    run = repo.check_runs.get(ctx.int_param("check_run_id"))
    if run is None:
        raise not_found()
    return run


def update_check_run(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="checks", level="write", role="write")
    app_id = _require_app(ctx)
    run = _find(ctx, repo)
    if run.app_id != app_id:
        raise ApiError(
            403, f"Invalid app_id `{app_id}` - check run can only be modified by its GitHub App."
        )
    was_completed = run.status == "completed"
    _apply(run, ctx.json(), ctx.emu.store.now())
    if run.status == "completed" and not was_completed:
        _announce(ctx, repo, run, "completed")
    return Reply(200, show(ctx.urls, ctx.emu.store, repo, run))


def get_check_run(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="checks")
    return Reply(200, show(ctx.urls, ctx.emu.store, repo, _find(ctx, repo)))


def list_for_ref(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="checks")
    sha = open_git(repo).resolve(ctx.params["ref"])
    if sha is None:
        raise ApiError(422, "No commit found for SHA: " + ctx.params["ref"])
    name = ctx.query.get("check_name")
    runs = [
        r
        for r in sorted(repo.check_runs.values(), key=lambda r: r.id, reverse=True)
        if r.head_sha == sha and (name is None or r.name == name)
    ]
    every = [show(ctx.urls, ctx.emu.store, repo, r) for r in runs]
    return paginate(ctx, every, wrap=lambda chunk: {"total_count": len(every), "check_runs": chunk})


ROUTES = [
    Spec("POST", "/repos/{owner}/{repo}/check-runs", create_check_run),
    Spec("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}", get_check_run),
    Spec("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}", update_check_run),
    Spec("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs", list_for_ref),
]
