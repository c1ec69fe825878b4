"""Repositories, branches, commits and collaborator permissions."""

from __future__ import annotations

import re

from emulator.gitview import exact_ref, open_git
from emulator.moves import rename_repo, transfer_repo
from emulator.render import base
from emulator.render import repos as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import ROLE_RANK, User

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

#: GitHub's legacy ``permission`` for each role (maintain -> write, triage -> read).
LEGACY = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


def get_repo(ctx: Ctx) -> Reply:
    repo = ctx.repo()
    out = render.full_repository(ctx.urls, repo, open_issues=ctx.emu.events.open_issues(repo))
    if ctx.principal.user is not None:
        rank = ROLE_RANK[repo.role_of(ctx.principal.user.login)]
        out["permissions"] = {
            "admin": rank >= 5,
            "maintain": rank >= 4,
            "push": rank >= 3,
            "triage": rank >= 2,
            "pull": rank >= 1,
        }
    return Reply(200, out)


def update_repo(ctx: Ctx) -> Reply:
    """``PATCH /repos/{owner}/{repo}``: only ``name`` (a rename) is modelled."""
    repo = ctx.repo(permission="administration", level="write", role="admin")
    name = ctx.json().get("name")
    if name is not None:
        if not isinstance(name, str) or not _NAME.match(name) or name.endswith(".git"):
            raise validation(resource="Repository", code="invalid", field="name")
        rename_repo(ctx.emu, repo, name, ctx.actor())
    return Reply(
        200, render.repository(ctx.urls, repo, open_issues=ctx.emu.events.open_issues(repo))
    )


def transfer(ctx: Ctx) -> Reply:
    """``POST /repos/{owner}/{repo}/transfer`` ``{new_owner}``: 202, like GitHub."""
    repo = ctx.repo(permission="administration", level="write", role="admin")
    new_owner = ctx.emu.store.user(str(ctx.json().get("new_owner", "")))
    if new_owner is None:
        raise validation(resource="Repository", code="invalid", field="new_owner")
    transfer_repo(ctx.emu, repo, new_owner, ctx.actor())
    return Reply(202, render.repository(ctx.urls, repo))


def list_branches(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    refs = open_git(repo).list_refs("refs/heads/")
    return paginate(
        ctx,
        [
            render.short_branch(ctx.urls, repo, n.removeprefix("refs/heads/"), s)
            for n, s in sorted(refs.items())
        ],
    )


def get_branch(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    name = ctx.params["branch"]
    sha = exact_ref(repo, f"refs/heads/{name}")
    if sha is None:
        raise ApiError(404, "Branch not found")
    return Reply(200, render.branch(ctx.urls, repo, name, git.commit_info(sha)))


def get_commit(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    ref = ctx.params["ref"]
    sha = git.resolve(ref)
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ref}")
    return Reply(200, render.commit(ctx.urls, repo, git.commit_info(sha)))


def get_git_commit(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    sha = ctx.params["commit_sha"]
    if git.resolve(sha) != sha:
        raise not_found()
    return Reply(200, render.git_commit(ctx.urls, repo, git.commit_info(sha)))


def compare_commits(ctx: Ctx) -> Reply:
    """``GET /compare/{base}...{head}``: how head relates to base (GitHub's
    ``status``: identical, ahead, behind or diverged), from their real merge base."""
    repo = ctx.repo(permission="contents")
    base_ref, sep, head_ref = ctx.params["basehead"].partition("...")
    if not sep or not base_ref or not head_ref:
        raise not_found()
    git = open_git(repo)
    base_sha, head_sha = git.resolve(base_ref), git.resolve(head_ref)
    if base_sha is None or head_sha is None:
        raise not_found()
    found = git.compare(base_sha, head_sha)
    if found.merge_base is None:
        raise ApiError(404, f"No common ancestor between {base_ref} and {head_ref}.")
    return Reply(200, render.comparison(ctx.urls, repo, git, found))


def collaborator_permission(ctx: Ctx) -> Reply:
    repo = ctx.repo()
    user = ctx.emu.store.user(ctx.params["username"])
    if user is None:
        raise not_found()
    role = repo.role_of(user.login)
    rank = ROLE_RANK[role]
    shown = base.user(ctx.urls, user)
    shown["role_name"] = role
    shown["permissions"] = {
        "admin": rank >= 5,
        "maintain": rank >= 4,
        "push": rank >= 3,
        "triage": rank >= 2,
        "pull": rank >= 1,
    }
    return Reply(200, {"permission": LEGACY[role], "role_name": role, "user": shown})


def get_user(ctx: Ctx) -> Reply:
    user = ctx.emu.store.user(ctx.params["username"])
    if user is None:
        raise not_found()
    return Reply(200, _public_user(ctx, user))


def authenticated_user(ctx: Ctx) -> Reply:
    if ctx.principal.user is None:
        raise ApiError(403, "Resource not accessible by integration")
    return Reply(200, _public_user(ctx, ctx.principal.user))


def _public_user(ctx: Ctx, user: User) -> dict[str, object]:
    out = base.user(ctx.urls, user, with_contact=True)
    out.update(
        {
            "company": None,
            "blog": "",
            "location": None,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": 0,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": base.ts(user.created_at),
            "updated_at": base.ts(user.created_at),
        }
    )
    return out


def rate_limit(ctx: Ctx) -> Reply:
    return Reply(200, ctx.emu.rate.overview(ctx.principal))


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}", get_repo),
    Spec("PATCH", "/repos/{owner}/{repo}", update_repo),
    Spec("POST", "/repos/{owner}/{repo}/transfer", transfer),
    Spec("GET", "/repos/{owner}/{repo}/branches", list_branches),
    Spec("GET", "/repos/{owner}/{repo}/branches/{branch}", get_branch),
    Spec("GET", "/repos/{owner}/{repo}/commits/{ref}", get_commit),
    Spec("GET", "/repos/{owner}/{repo}/git/commits/{commit_sha}", get_git_commit),
    Spec("GET", "/repos/{owner}/{repo}/compare/{basehead}", compare_commits),
    Spec(
        "GET", "/repos/{owner}/{repo}/collaborators/{username}/permission", collaborator_permission
    ),
    Spec("GET", "/users/{username}", get_user),
    Spec("GET", "/user", authenticated_user),
    Spec("GET", "/rate_limit", rate_limit, auth="any"),
]
