"""Issues and their labels (pull requests are issues too, as on GitHub)."""

from __future__ import annotations

from typing import Any

from emulator.render import issues as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import Issue, Label, Repo, Store, User


def find_issue(repo: Repo, number: int) -> Issue:
    issue = repo.issues.get(number)
    if issue is None:
        raise not_found()
    return issue


def ensure_label(store: Store, repo: Repo, name: str) -> Label:
    """GitHub creates unknown labels on the fly when you add them to an issue."""
    key = name.lower()
    if key not in repo.labels:
        repo.labels[key] = Label(id=store.next_id("label"), name=name)
    return repo.labels[key]


def announce(ctx: Ctx, repo: Repo, issue: Issue, action: str, sender: User, **extra: Any) -> None:
    """``issues.<action>``, or ``pull_request.<action>`` when the issue is a PR."""
    if issue.pull is not None:
        from emulator.rest.pulls import announce_pull

        announce_pull(ctx.emu, repo, issue.pull, action, sender, **extra)
        return
    urls = ctx.emu.webhook_urls()
    body: dict[str, Any] = {
        "action": action,
        "issue": render.issue(urls, ctx.emu.store, repo, issue),
    }
    if "label" in extra:
        body["label"] = render.label(urls, repo, extra["label"])
    if "changes" in extra:
        body["changes"] = extra["changes"]
    ctx.emu.events.for_repo(repo, "issues", body, sender=sender)


def list_issues(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    state = ctx.query.get("state", "open")
    wanted = {n.strip().lower() for n in ctx.query.get("labels", "").split(",") if n.strip()}
    found = [
        i
        for i in sorted(repo.issues.values(), key=lambda i: i.number, reverse=True)
        if (state == "all" or i.state == state) and wanted <= {n.lower() for n in i.labels}
    ]
    return paginate(ctx, [render.issue(ctx.urls, ctx.emu.store, repo, i) for i in found])


def create_issue(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="read")
    body = ctx.json()
    title = body.get("title")
    if not isinstance(title, str) or not title:
        raise validation(resource="Issue", code="missing_field", field="title")
    store, now, actor = ctx.emu.store, ctx.emu.store.now(), ctx.actor()
    issue = Issue(
        id=store.next_id("issue"),
        number=repo.next_number,
        title=title,
        body=body.get("body"),
        user=actor,
        created_at=now,
        updated_at=now,
        performed_via_app=ctx.principal.app.id if ctx.principal.app else None,
    )
    repo.next_number += 1
    issue.labels = [ensure_label(store, repo, str(n)).name for n in body.get("labels") or []]
    repo.issues[issue.number] = issue
    announce(ctx, repo, issue, "opened", actor)
    return Reply(201, render.issue(ctx.urls, store, repo, issue))


def get_issue(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    return Reply(200, render.issue(ctx.urls, ctx.emu.store, repo, issue))


def update_issue(ctx: Ctx) -> Reply:
    # As on GitHub, an issue's author may edit and close or reopen it with
    # read access only; labels and anyone else's issue need triage.
    repo = ctx.repo(permission="issues", level="write", role="read")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    body, store, actor = ctx.json(), ctx.emu.store, ctx.actor()
    own = ctx.principal.user is not None and issue.user.id == ctx.principal.user.id
    if not (own and "labels" not in body):
        ctx.repo(permission="issues", level="write", role="triage")
    changes: dict[str, Any] = {}
    for field in ("title", "body"):
        if field in body and body[field] != getattr(issue, field):
            changes[field] = {"from": getattr(issue, field)}
            setattr(issue, field, body[field])
    if "labels" in body:
        set_labels(
            ctx, repo, issue, [str(n if isinstance(n, str) else n["name"]) for n in body["labels"]]
        )
    state = body.get("state")
    if state not in (None, "open", "closed"):
        raise validation(resource="Issue", code="invalid", field="state")
    issue.updated_at = store.now()
    if changes:
        announce(ctx, repo, issue, "edited", actor, changes=changes)
    if state and state != issue.state:
        set_state(ctx, repo, issue, state, actor, reason=body.get("state_reason"))
    return Reply(200, render.issue(ctx.urls, store, repo, issue))


def set_state(
    ctx: Ctx, repo: Repo, issue: Issue, state: str, actor: User, *, reason: Any = None
) -> None:
    now = ctx.emu.store.now()
    if state == "closed":
        issue.state, issue.closed_at, issue.closed_by = "closed", now, actor
        issue.state_reason = reason or "completed"
        announce(ctx, repo, issue, "closed", actor)
    else:
        issue.state, issue.closed_at, issue.closed_by, issue.state_reason = (
            "open",
            None,
            None,
            "reopened",
        )
        announce(ctx, repo, issue, "reopened", actor)
    issue.updated_at = now


def set_labels(ctx: Ctx, repo: Repo, issue: Issue, names: list[str]) -> None:
    current = {n.lower() for n in issue.labels}
    target = {n.lower() for n in names}
    for name in list(issue.labels):
        if name.lower() not in target:
            remove_label(ctx, repo, issue, name)
    for name in names:
        if name.lower() not in current:
            add_label(ctx, repo, issue, name)


def add_label(ctx: Ctx, repo: Repo, issue: Issue, name: str) -> None:
    if name.lower() in {n.lower() for n in issue.labels}:
        return  # already there: GitHub sends no event
    label = ensure_label(ctx.emu.store, repo, name)
    issue.labels.append(label.name)
    issue.updated_at = ctx.emu.store.now()
    announce(ctx, repo, issue, "labeled", ctx.actor(), label=label)


def remove_label(ctx: Ctx, repo: Repo, issue: Issue, name: str) -> None:
    match = next((n for n in issue.labels if n.lower() == name.lower()), None)
    if match is None:
        raise ApiError(404, "Label does not exist")
    issue.labels.remove(match)
    issue.updated_at = ctx.emu.store.now()
    announce(ctx, repo, issue, "unlabeled", ctx.actor(), label=repo.labels[match.lower()])


def _label_names(body: Any) -> list[str]:
    raw = body.get("labels", []) if isinstance(body, dict) else body
    if not isinstance(raw, list):
        raise validation(resource="Label", code="invalid", field="labels")
    return [str(x["name"] if isinstance(x, dict) else x) for x in raw]


def add_labels(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="triage")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    for name in _label_names(ctx.json()):
        add_label(ctx, repo, issue, name)
    return Reply(200, render.issue_labels(ctx.urls, repo, issue))


def replace_labels(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="triage")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    set_labels(ctx, repo, issue, _label_names(ctx.json()))
    return Reply(200, render.issue_labels(ctx.urls, repo, issue))


def delete_label(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="triage")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    remove_label(ctx, repo, issue, ctx.params["name"])
    return Reply(200, render.issue_labels(ctx.urls, repo, issue))


def list_issue_labels(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    issue = find_issue(repo, ctx.int_param("issue_number"))
    return paginate(ctx, render.issue_labels(ctx.urls, repo, issue))


def list_repo_labels(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    return paginate(ctx, [render.label(ctx.urls, repo, lbl) for lbl in repo.labels.values()])


def create_repo_label(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues", level="write", role="write")
    body = ctx.json()
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise validation(resource="Label", code="missing_field", field="name")
    if name.lower() in repo.labels:
        raise validation(resource="Label", code="already_exists", field="name")
    label = ensure_label(ctx.emu.store, repo, name)
    label.color = str(body.get("color", label.color)).lstrip("#")
    label.description = body.get("description")
    return Reply(201, render.label(ctx.urls, repo, label))


def get_repo_label(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="issues")
    label = repo.labels.get(ctx.params["name"].lower())
    if label is None:
        raise not_found()
    return Reply(200, render.label(ctx.urls, repo, label))


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}/issues", list_issues),
    Spec("POST", "/repos/{owner}/{repo}/issues", create_issue),
    Spec("GET", "/repos/{owner}/{repo}/issues/{issue_number}", get_issue),
    Spec("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}", update_issue),
    Spec("GET", "/repos/{owner}/{repo}/issues/{issue_number}/labels", list_issue_labels),
    Spec("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels", add_labels),
    Spec("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels", replace_labels),
    Spec("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}", delete_label),
    Spec("GET", "/repos/{owner}/{repo}/labels", list_repo_labels),
    Spec("POST", "/repos/{owner}/{repo}/labels", create_repo_label),
    Spec("GET", "/repos/{owner}/{repo}/labels/{name}", get_repo_label),
]
