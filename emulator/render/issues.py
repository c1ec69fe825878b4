"""Labels, issues and issue comments."""

from __future__ import annotations

from emulator.render.base import Json, Urls, app, author_association, node_id, reactions, ts, user
from emulator.state import Comment, Issue, Label, Repo, Store


def label(urls: Urls, repo: Repo, lbl: Label) -> Json:
    return {
        "id": lbl.id,
        "node_id": node_id("Label", lbl.id),
        "url": f"{urls.repo_api(repo)}/labels/{lbl.name}",
        "name": lbl.name,
        "color": lbl.color,
        "default": lbl.default,
        "description": lbl.description,
        "archived_at": None,
        "archived_by": None,
    }


def issue_labels(urls: Urls, repo: Repo, issue: Issue) -> list[Json]:
    return [label(urls, repo, repo.labels[name.lower()]) for name in issue.labels]


def comment_count(repo: Repo, number: int) -> int:
    return sum(1 for c in repo.comments.values() if c.issue_number == number)


def issue(urls: Urls, store: Store, repo: Repo, iss: Issue) -> Json:
    api = f"{urls.repo_api(repo)}/issues/{iss.number}"
    out: Json = {
        "id": iss.id,
        "node_id": node_id("Issue", iss.id),
        "url": api,
        "repository_url": urls.repo_api(repo),
        "labels_url": f"{api}/labels{{/name}}",
        "comments_url": f"{api}/comments",
        "events_url": f"{api}/events",
        "html_url": f"{urls.repo_web(repo)}/{'pull' if iss.pull else 'issues'}/{iss.number}",
        "number": iss.number,
        "state": iss.state,
        "state_reason": iss.state_reason,
        "title": iss.title,
        "body": iss.body,
        "user": user(urls, iss.user),
        "labels": issue_labels(urls, repo, iss),
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": iss.locked,
        "active_lock_reason": None,
        "comments": comment_count(repo, iss.number),
        "closed_at": ts(iss.closed_at),
        "created_at": ts(iss.created_at),
        "updated_at": ts(iss.updated_at),
        "closed_by": user(urls, iss.closed_by) if iss.closed_by else None,
        "author_association": author_association(repo, iss.user),
        "reactions": reactions(api),
        "timeline_url": f"{api}/timeline",
        "performed_via_github_app": _via_app(urls, store, iss.performed_via_app),
        "draft": iss.pull.draft if iss.pull else False,
    }
    if iss.pull is not None:
        pulls = f"{urls.repo_api(repo)}/pulls/{iss.number}"
        web = f"{urls.repo_web(repo)}/pull/{iss.number}"
        out["pull_request"] = {
            "url": pulls,
            "html_url": web,
            "diff_url": f"{web}.diff",
            "patch_url": f"{web}.patch",
            "merged_at": ts(iss.pull.merged_at),
        }
    return out


def _via_app(urls: Urls, store: Store, app_id: int | None) -> Json | None:
    if app_id is None or app_id not in store.apps:
        return None
    return app(urls, store.apps[app_id])


def comment(urls: Urls, store: Store, repo: Repo, c: Comment) -> Json:
    api = f"{urls.repo_api(repo)}/issues/comments/{c.id}"
    iss = repo.issues[c.issue_number]
    kind = "pull" if iss.pull else "issues"
    return {
        "id": c.id,
        "node_id": node_id("IssueComment", c.id),
        "url": api,
        "html_url": f"{urls.repo_web(repo)}/{kind}/{c.issue_number}#issuecomment-{c.id}",
        "issue_url": f"{urls.repo_api(repo)}/issues/{c.issue_number}",
        "body": c.body,
        "user": user(urls, c.user),
        "created_at": ts(c.created_at),
        "updated_at": ts(c.updated_at),
        "author_association": author_association(repo, c.user),
        "performed_via_github_app": _via_app(urls, store, c.performed_via_app),
        "reactions": reactions(api),
    }
