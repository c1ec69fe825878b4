"""Pull requests: create (drafts included), list with filters, get, update."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from emulator.gitview import open_git, pull_git
from emulator.render import pulls as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import Issue, PullRequest, Repo, User

if TYPE_CHECKING:
    from emulator.app import Emulator

WRITE = {"permission": "pull_requests", "level": "write", "role": "write"}


def announce_pull(
    emu: Emulator, repo: Repo, pr: PullRequest, action: str, sender: User, **extra: Any
) -> None:
    urls = emu.webhook_urls()
    body: dict[str, Any] = {
        "action": action,
        "number": pr.number,
        "pull_request": render.pull(urls, repo, pr, pull_git(repo, pr, mergeable=False)),
    }
    if "label" in extra:
        from emulator.render.issues import label

        body["label"] = label(urls, repo, extra["label"])
    if "changes" in extra:
        body["changes"] = extra["changes"]
    emu.events.for_repo(repo, "pull_request", body, sender=sender)


def find_pull(repo: Repo, number: int) -> PullRequest:
    issue = repo.issues.get(number)
    if issue is None or issue.pull is None:
        raise not_found()
    return issue.pull


def _head(ctx: Ctx, raw: Any, repo: Repo) -> tuple[Repo, str]:
    """``head`` is ``branch`` or ``owner:branch``; another owner names its fork in
    ``repo``'s network (a fork's pull request). Unknown owners: invalid head."""
    if not isinstance(raw, str) or not raw:
        raise validation(resource="PullRequest", code="invalid", field="head")
    owner, sep, branch = raw.rpartition(":")
    if not sep or owner.lower() == repo.owner.login.lower():
        return repo, branch
    fork = ctx.emu.store.network_fork(repo, owner)
    if fork is None or fork.pending_requests > 0 or not branch:
        raise validation(resource="PullRequest", code="invalid", field="head")
    return fork, branch


def head_repo_of(repo: Repo, pr: PullRequest) -> Repo:
    return pr.head_repo or repo


def create_pull(ctx: Ctx) -> Reply:
    repo = ctx.repo(**WRITE)
    body, store = ctx.json(), ctx.emu.store
    head_repo, head = _head(ctx, body.get("head"), repo)
    base_ref = body.get("base")
    title = body.get("title")
    if not isinstance(title, str) or not title:
        raise validation(resource="PullRequest", code="missing_field", field="title")
    if body.get("draft") and not repo.drafts_supported:
        raise validation(
            resource="PullRequest",
            code="custom",
            message="Draft pull requests are not supported in this repository.",
        )
    git = open_git(repo)
    head_sha = open_git(head_repo).resolve(f"refs/heads/{head}") if head else None
    if head_sha is None:
        raise validation(resource="PullRequest", code="invalid", field="head")
    base_sha = git.resolve(f"refs/heads/{base_ref}") if isinstance(base_ref, str) else None
    if base_sha is None:
        raise validation(resource="PullRequest", code="invalid", field="base")
    for pr in repo.pulls():
        if (
            pr.issue.state == "open"
            and head_repo_of(repo, pr) is head_repo
            and pr.head_ref == head
            and pr.base_ref == base_ref
        ):
            raise validation(
                resource="PullRequest",
                code="custom",
                message=f"A pull request already exists for {head_repo.owner.login}:{head}.",
            )
    pull_ref = f"refs/pull/{repo.next_number}/head"
    if head_repo is not repo:
        # GitHub keeps every pull request's head in the base repository too.
        git.copy_commit(open_git(head_repo), head_sha, pull_ref)
    if head_sha == base_sha or git.is_ancestor(head_sha, base_sha):
        if head_repo is not repo:
            git.delete_ref(pull_ref)
        raise validation(
            resource="PullRequest",
            code="custom",
            message=f"No commits between {base_ref} and {head}",
        )
    now, actor = store.now(), ctx.actor()
    issue = Issue(
        id=store.next_id("issue"),
        number=repo.next_number,
        title=title,
        body=body.get("body"),
        user=actor,
        created_at=now,
        updated_at=now,
    )
    repo.next_number += 1
    issue.pull = PullRequest(
        id=store.next_id("pull"),
        issue=issue,
        head_ref=head,
        base_ref=str(base_ref),
        draft=bool(body.get("draft", False)),
        head_sha=head_sha,
        base_sha=base_sha,
        maintainer_can_modify=bool(body.get("maintainer_can_modify", False)),
        head_repo=None if head_repo is repo else head_repo,
    )
    repo.issues[issue.number] = issue
    announce_pull(ctx.emu, repo, issue.pull, "opened", actor)
    return Reply(201, render.pull(ctx.urls, repo, issue.pull, pull_git(repo, issue.pull)))


def list_pulls(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests")
    state = ctx.query.get("state", "open")
    head = ctx.query.get("head")
    base_ref = ctx.query.get("base")
    if state not in ("open", "closed", "all"):
        raise validation(resource="PullRequest", code="invalid", field="state")
    found = []
    for pr in repo.pulls():
        if state != "all" and pr.issue.state != state:
            continue
        if base_ref and pr.base_ref != base_ref:
            continue
        if head:
            owner, _, branch = head.rpartition(":")
            head_owner = head_repo_of(repo, pr).owner.login
            if not owner or owner.lower() != head_owner.lower() or pr.head_ref != branch:
                continue  # GitHub ignores a head filter without "owner:" -> matches nothing here
        found.append(pr)
    key = ctx.query.get("sort", "created")
    descending = ctx.query.get("direction", "desc" if key == "created" else "asc") == "desc"
    if key == "updated":
        found.sort(key=lambda p: (p.issue.updated_at, p.number), reverse=descending)
    else:
        found.sort(key=lambda p: p.number, reverse=descending)
    return paginate(
        ctx,
        [render.pull_simple(ctx.urls, repo, p, pull_git(repo, p, mergeable=False)) for p in found],
    )


def get_pull(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="pull_requests")
    pr = find_pull(repo, ctx.int_param("pull_number"))
    view = pull_git(repo, pr)
    if pr.mergeable_unknown_reads > 0 and pr.issue.state == "open":
        pr.mergeable_unknown_reads -= 1
        view = replace(view, mergeable=None)
    return Reply(200, render.pull(ctx.urls, repo, pr, view))


def update_pull(ctx: Ctx) -> Reply:
    repo = ctx.repo(**WRITE)
    pr = find_pull(repo, ctx.int_param("pull_number"))
    body, actor, issue = ctx.json(), ctx.actor(), pr.issue
    changes: dict[str, Any] = {}
    for field in ("title", "body"):
        if field in body and body[field] != getattr(issue, field):
            changes[field] = {"from": getattr(issue, field)}
            setattr(issue, field, body[field])
    if "base" in body and body["base"] != pr.base_ref:
        if open_git(repo).resolve(f"refs/heads/{body['base']}") is None:
            raise validation(resource="PullRequest", code="invalid", field="base")
        changes["base"] = {"ref": {"from": pr.base_ref}, "sha": {"from": pr.base_sha}}
        pr.base_ref = str(body["base"])
    issue.updated_at = ctx.emu.store.now()
    if changes:
        announce_pull(ctx.emu, repo, pr, "edited", actor, changes=changes)
    state = body.get("state")
    if state not in (None, "open", "closed"):
        raise validation(resource="PullRequest", code="invalid", field="state")
    if state and state != issue.state:
        if pr.merged:
            raise validation(
                resource="PullRequest", code="custom", message="Cannot reopen a merged pull request"
            )
        from emulator.rest.issues import set_state

        set_state(ctx, repo, issue, state, actor)
    return Reply(200, render.pull(ctx.urls, repo, pr, pull_git(repo, pr)))


def ready_for_review(emu: Emulator, repo: Repo, pr: PullRequest, actor: User) -> None:
    """No REST endpoint does this (GitHub uses GraphQL); the scripting API calls it."""
    if not pr.draft:
        raise ApiError(422, "Pull request is not a draft")
    pr.draft = False
    pr.issue.updated_at = emu.store.now()
    announce_pull(emu, repo, pr, "ready_for_review", actor)


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}/pulls", list_pulls),
    Spec("POST", "/repos/{owner}/{repo}/pulls", create_pull),
    Spec("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", get_pull),
    Spec("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}", update_pull),
]
