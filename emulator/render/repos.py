"""Repositories, branches, refs and commits."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from emulator.render.base import Json, Urls, node_id, ts, user
from emulator.state import Repo

if TYPE_CHECKING:
    from emulator.git import CommitInfo


def repository(urls: Urls, repo: Repo, *, open_issues: int = 0, push_event: bool = False) -> Json:
    """The full repository object (REST ``GET /repos``, and every webhook's ``repository``).

    ``push_event``: the push webhook carries ``created_at``/``pushed_at`` as Unix
    timestamps and two legacy keys; GitHub really does this.
    """
    api, web = urls.repo_api(repo), urls.repo_web(repo)
    created: str | int | None = ts(repo.created_at)
    pushed: str | int | None = ts(repo.pushed_at)
    if push_event:
        created, pushed = int(repo.created_at.timestamp()), int(repo.pushed_at.timestamp())
    out: Json = {
        "id": repo.id,
        "node_id": node_id("Repository", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": user(urls, repo.owner),
        "html_url": web,
        "description": repo.description,
        "fork": repo.fork,
        "url": api,
        "forks_url": f"{api}/forks",
        "keys_url": f"{api}/keys{{/key_id}}",
        "collaborators_url": f"{api}/collaborators{{/collaborator}}",
        "teams_url": f"{api}/teams",
        "hooks_url": f"{api}/hooks",
        "issue_events_url": f"{api}/issues/events{{/number}}",
        "events_url": f"{api}/events",
        "assignees_url": f"{api}/assignees{{/user}}",
        "branches_url": f"{api}/branches{{/branch}}",
        "tags_url": f"{api}/tags",
        "blobs_url": f"{api}/git/blobs{{/sha}}",
        "git_tags_url": f"{api}/git/tags{{/sha}}",
        "git_refs_url": f"{api}/git/refs{{/sha}}",
        "trees_url": f"{api}/git/trees{{/sha}}",
        "statuses_url": f"{api}/statuses/{{sha}}",
        "languages_url": f"{api}/languages",
        "stargazers_url": f"{api}/stargazers",
        "contributors_url": f"{api}/contributors",
        "subscribers_url": f"{api}/subscribers",
        "subscription_url": f"{api}/subscription",
        "commits_url": f"{api}/commits{{/sha}}",
        "git_commits_url": f"{api}/git/commits{{/sha}}",
        "comments_url": f"{api}/comments{{/number}}",
        "issue_comment_url": f"{api}/issues/comments{{/number}}",
        "contents_url": f"{api}/contents/{{+path}}",
        "compare_url": f"{api}/compare/{{base}}...{{head}}",
        "merges_url": f"{api}/merges",
        "archive_url": f"{api}/{{archive_format}}{{/ref}}",
        "downloads_url": f"{api}/downloads",
        "issues_url": f"{api}/issues{{/number}}",
        "pulls_url": f"{api}/pulls{{/number}}",
        "milestones_url": f"{api}/milestones{{/number}}",
        "notifications_url": f"{api}/notifications{{?since,all,participating}}",
        "labels_url": f"{api}/labels{{/name}}",
        "releases_url": f"{api}/releases{{/id}}",
        "deployments_url": f"{api}/deployments",
        "created_at": created,
        "updated_at": ts(repo.updated_at),
        "pushed_at": pushed,
        "git_url": f"{web}.git".replace("http", "git", 1),
        "ssh_url": f"git@emulator:{repo.full_name}.git",
        "clone_url": f"{web}.git",
        "svn_url": web,
        "mirror_url": None,
        "homepage": None,
        "size": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": None,
        "has_issues": True,
        "has_projects": True,
        "has_downloads": True,
        "has_wiki": True,
        "has_pages": False,
        "has_discussions": False,
        "forks_count": repo.forks_count,
        "archived": False,
        "disabled": False,
        "open_issues_count": open_issues,
        "license": None,
        "allow_forking": True,
        "is_template": False,
        "web_commit_signoff_required": False,
        "topics": [],
        "visibility": "private" if repo.private else "public",
        "forks": repo.forks_count,
        "open_issues": open_issues,
        "watchers": 0,
        "default_branch": repo.default_branch,
        "allow_merge_commit": True,
        "allow_squash_merge": True,
        "allow_rebase_merge": True,
        "delete_branch_on_merge": False,
        "network_count": 0,
        "subscribers_count": 0,
        "custom_properties": {},
    }
    if push_event:
        out["owner"] = user(urls, repo.owner, with_contact=True)
        out["stargazers"] = 0
        out["master_branch"] = repo.default_branch
    return out


def full_repository(urls: Urls, repo: Repo, *, open_issues: int = 0) -> Json:
    """``GET /repos/{o}/{r}`` (and the fork endpoint's answer): a fork names its
    ``parent`` and the network's ``source``."""
    out = repository(urls, repo, open_issues=open_issues)
    if repo.parent is not None:
        out["parent"] = repository(urls, repo.parent)
        out["source"] = repository(urls, repo.network_root)
    return out


def repository_brief(repo: Repo) -> Json:
    """The five-field form used by installation events."""
    return {
        "id": repo.id,
        "node_id": node_id("Repository", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
    }


def git_ref(urls: Urls, repo: Repo, ref: str, sha: str) -> Json:
    return {
        "ref": ref,
        "node_id": node_id("Ref", abs(hash((repo.id, ref))) % 10**9),
        "url": f"{urls.repo_api(repo)}/git/{ref}",
        "object": {"sha": sha, "type": "commit", "url": f"{urls.repo_api(repo)}/git/commits/{sha}"},
    }


def _git_person(name: str, email: str, date: datetime) -> Json:
    return {"name": name, "email": email, "date": ts(date)}


def git_commit(urls: Urls, repo: Repo, info: CommitInfo) -> Json:
    """``GET /git/commits/{sha}``: the raw git object."""
    api = urls.repo_api(repo)
    return {
        "sha": info.sha,
        "node_id": node_id("Commit", int(info.sha[:7], 16)),
        "url": f"{api}/git/commits/{info.sha}",
        "html_url": f"{urls.repo_web(repo)}/commit/{info.sha}",
        "author": _git_person(info.author_name, info.author_email, info.author_date),
        "committer": _git_person(info.committer_name, info.committer_email, info.committer_date),
        "message": info.message,
        "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
        "parents": [
            {
                "sha": p,
                "url": f"{api}/git/commits/{p}",
                "html_url": f"{urls.repo_web(repo)}/commit/{p}",
            }
            for p in info.parents
        ],
        "verification": {
            "verified": False,
            "reason": "unsigned",
            "signature": None,
            "payload": None,
            "verified_at": None,
        },
    }


def commit(urls: Urls, repo: Repo, info: CommitInfo) -> Json:
    """``GET /commits/{ref}``: the commit with GitHub's account mapping (none here)."""
    api = urls.repo_api(repo)
    inner = git_commit(urls, repo, info)
    return {
        "url": f"{api}/commits/{info.sha}",
        "sha": info.sha,
        "node_id": inner["node_id"],
        "html_url": f"{urls.repo_web(repo)}/commit/{info.sha}",
        "comments_url": f"{api}/commits/{info.sha}/comments",
        "commit": {
            "url": inner["url"],
            "author": inner["author"],
            "committer": inner["committer"],
            "message": info.message,
            "comment_count": 0,
            "tree": inner["tree"],
            "verification": inner["verification"],
        },
        "author": None,
        "committer": None,
        "parents": inner["parents"],
        "files": [],
        "stats": {"additions": 0, "deletions": 0, "total": 0},
    }


def short_branch(urls: Urls, repo: Repo, name: str, sha: str) -> Json:
    return {
        "name": name,
        "commit": {"sha": sha, "url": f"{urls.repo_api(repo)}/commits/{sha}"},
        "protected": False,
    }


def branch(urls: Urls, repo: Repo, name: str, info: CommitInfo) -> Json:
    api = urls.repo_api(repo)
    return {
        "name": name,
        "commit": commit(urls, repo, info),
        "_links": {"self": f"{api}/branches/{name}", "html": f"{urls.repo_web(repo)}/tree/{name}"},
        "protected": False,
        "protection": {"enabled": False, "required_status_checks": None},
        "protection_url": f"{api}/branches/{name}/protection",
    }
