"""Shared pieces of every response: URLs, timestamps, node ids, users, apps.

Shapes follow GitHub's REST schemas (and the webhook payloads, which embed the
same objects): every field the schema requires is present, even when we can
only say ``null`` or ``0`` about it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from emulator.state import App, Installation, Repo, User

Json = dict[str, Any]


@dataclass(frozen=True)
class Urls:
    """Where the API and the web (git, html) live, as the caller reached us."""

    api: str
    web: str

    def repo_api(self, repo: Repo) -> str:
        return f"{self.api}/repos/{repo.full_name}"

    def repo_web(self, repo: Repo) -> str:
        return f"{self.web}/{repo.full_name}"


def ts(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, ident: int) -> str:
    return base64.b64encode(f"0:{kind}{ident}".encode()).decode().rstrip("=")


def user(urls: Urls, u: User, *, with_contact: bool = False) -> Json:
    base = f"{urls.api}/users/{u.login}"
    out: Json = {
        "login": u.login,
        "id": u.id,
        "node_id": node_id(u.type, u.id),
        "avatar_url": f"{urls.web}/avatars/u/{u.id}?v=4",
        "gravatar_id": "",
        "url": base,
        "html_url": f"{urls.web}/{u.login}",
        "followers_url": f"{base}/followers",
        "following_url": f"{base}/following{{/other_user}}",
        "gists_url": f"{base}/gists{{/gist_id}}",
        "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{base}/subscriptions",
        "organizations_url": f"{base}/orgs",
        "repos_url": f"{base}/repos",
        "events_url": f"{base}/events{{/privacy}}",
        "received_events_url": f"{base}/received_events",
        "type": u.type,
        "user_view_type": "public",
        "site_admin": u.site_admin,
    }
    if with_contact:
        out["name"] = u.name or u.login
        out["email"] = u.email or noreply_email(u)
    return out


def noreply_email(u: User) -> str:
    return f"{u.id}+{u.login}@users.noreply.github.com"


def organization(urls: Urls, u: User) -> Json:
    base = f"{urls.api}/orgs/{u.login}"
    return {
        "login": u.login,
        "id": u.id,
        "node_id": node_id("Organization", u.id),
        "url": base,
        "repos_url": f"{base}/repos",
        "events_url": f"{base}/events",
        "hooks_url": f"{base}/hooks",
        "issues_url": f"{base}/issues",
        "members_url": f"{base}/members{{/member}}",
        "public_members_url": f"{base}/public_members{{/member}}",
        "avatar_url": f"{urls.web}/avatars/u/{u.id}?v=4",
        "description": None,
    }


def app(urls: Urls, a: App) -> Json:
    return {
        "id": a.id,
        "slug": a.slug,
        "client_id": a.client_id,
        "node_id": node_id("App", a.id),
        "owner": user(urls, a.owner),
        "name": a.name,
        "description": a.description,
        "external_url": f"{urls.web}/apps/{a.slug}",
        "html_url": f"{urls.web}/apps/{a.slug}",
        "created_at": ts(a.created_at),
        "updated_at": ts(a.created_at),
        "permissions": dict(a.permissions),
        "events": list(a.events),
        "installations_count": 0,
    }


def installation(urls: Urls, inst: Installation, a: App) -> Json:
    return {
        "id": inst.id,
        "node_id": node_id("Installation", inst.id),
        "account": user(urls, inst.account),
        "repository_selection": inst.repository_selection,
        "access_tokens_url": f"{urls.api}/app/installations/{inst.id}/access_tokens",
        "repositories_url": f"{urls.api}/installation/repositories",
        "html_url": f"{urls.web}/settings/installations/{inst.id}",
        "app_id": a.id,
        "client_id": a.client_id,
        "app_slug": a.slug,
        "target_id": inst.account.id,
        "target_type": inst.account.type,
        "permissions": dict(inst.permissions),
        "events": list(inst.events),
        "created_at": ts(inst.created_at),
        "updated_at": ts(inst.updated_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": user(urls, inst.suspended_by) if inst.suspended_by else None,
        "suspended_at": ts(inst.suspended_at),
    }


def author_association(repo: Repo, u: User) -> str:
    if u.id == repo.owner.id:
        return "OWNER"
    if repo.collaborators.get(u.login.lower(), "none") != "none":
        return "COLLABORATOR"
    return "NONE"


def reactions(url: str) -> Json:
    return {
        "url": f"{url}/reactions",
        "total_count": 0,
        "+1": 0,
        "-1": 0,
        "laugh": 0,
        "hooray": 0,
        "confused": 0,
        "heart": 0,
        "rocket": 0,
        "eyes": 0,
    }


def private_user(urls: Urls, u: User) -> Json:
    """``GET /user``: the signed-in user's own full profile."""
    created = ts(u.created_at)
    return user(urls, u) | {
        "name": u.name or u.login,
        "company": None,
        "blog": "",
        "location": None,
        "email": u.email,
        "hireable": None,
        "bio": None,
        "twitter_username": None,
        "public_repos": 0,
        "public_gists": 0,
        "followers": 0,
        "following": 0,
        "created_at": created,
        "updated_at": created,
        "private_gists": 0,
        "total_private_repos": 0,
        "owned_private_repos": 0,
        "disk_usage": 0,
        "collaborators": 0,
        "two_factor_authentication": True,
    }
