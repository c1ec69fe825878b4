"""Repositories, branches, commits and collaborator permissions."""

from __future__ import annotations

from emulator.gitview import open_git
from emulator.render import base
from emulator.render import repos as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate
from emulator.state import ROLE_RANK, User

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
    out = render.repository(ctx.urls, repo, open_issues=ctx.emu.events.open_issues(repo))
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
    sha = git.list_refs(f"refs/heads/{name}").get(f"refs/heads/{name}")
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


def get_content(ctx: Ctx) -> Reply:
    """``GET /repos/{owner}/{repo}/contents/{path}?ref=``: a file, base64 in
    ``content`` (wrapped every 60 characters, as GitHub does); a directory is
    its entries. 404 when the path (or ref) does not exist."""
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    ref = ctx.query.get("ref") or git.default_branch() or ""
    sha = git.resolve(ref)
    path = ctx.params["path"].strip("/")
    if sha is None:
        raise ApiError(404, f"No commit found for the ref {ref}")
    parent, _, name = path.rpartition("/")
    entries = git.list_tree(sha, parent) or []
    entry = next((e for e in entries if e.path.rpartition("/")[2] == name), None)
    if entry is None:
        raise not_found()
    if entry.type == "tree":
        listed = git.list_tree(sha, path) or []
        return Reply(200, [render.content_entry(ctx.urls, repo, e, ref) for e in listed])
    data = git.read_file(sha, path) if entry.type == "blob" else None
    if data is None:
        raise not_found()
    return Reply(200, render.content_file(ctx.urls, repo, entry, ref, data))


def get_git_commit(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    git = open_git(repo)
    sha = ctx.params["commit_sha"]
    if git.resolve(sha) != sha:
        raise not_found()
    return Reply(200, render.git_commit(ctx.urls, repo, git.commit_info(sha)))


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
    Spec("GET", "/repos/{owner}/{repo}/branches", list_branches),
    Spec("GET", "/repos/{owner}/{repo}/branches/{branch}", get_branch),
    Spec("GET", "/repos/{owner}/{repo}/commits/{ref}", get_commit),
    Spec("GET", "/repos/{owner}/{repo}/git/commits/{commit_sha}", get_git_commit),
    Spec("GET", "/repos/{owner}/{repo}/contents/{path}", get_content),
    Spec(
        "GET", "/repos/{owner}/{repo}/collaborators/{username}/permission", collaborator_permission
    ),
    Spec("GET", "/users/{username}", get_user),
    Spec("GET", "/user", authenticated_user),
    Spec("GET", "/rate_limit", rate_limit, auth="any"),
]
