"""Git references over REST, read from and written to the bare repository.

Nothing is cached: every read reads the refs (a loose ref file itself, else
through git), so REST and ``git ls-remote`` agree at every moment. Writes are
compare-and-swap in git and announced like pushes.
"""

from __future__ import annotations

from emulator.git import GitError, NotFastForward, ObjectNotFound, RefConflict
from emulator.gitview import RefChange, exact_ref, open_git, refs_updated
from emulator.render import repos as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate
from emulator.state import Repo

WRITE = {"permission": "contents", "level": "write", "role": "write"}


def _refs(repo: Repo, prefix: str) -> dict[str, str]:
    return open_git(repo).list_refs(prefix)


def _empty_check(repo: Repo) -> None:
    """409 for a repository without a branch. The default branch is looked up
    first: one ref, where listing every branch reads them all (a repository
    with 10,000 branches took 0.2-0.5 s a listing)."""
    if open_git(repo).resolve(f"refs/heads/{repo.default_branch}") is not None:
        return
    if not _refs(repo, "refs/heads/"):
        raise ApiError(409, "Git Repository is empty.")


def get_ref(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    _empty_check(repo)
    name = "refs/" + ctx.params["ref"]
    sha = exact_ref(repo, name)
    if sha is None:
        raise not_found()
    return Reply(200, render.git_ref(ctx.urls, repo, name, sha))


def matching_refs(ctx: Ctx) -> Reply:
    repo = ctx.repo(permission="contents")
    found = _refs(repo, "refs/" + ctx.params.get("ref", ""))
    return paginate(ctx, [render.git_ref(ctx.urls, repo, n, s) for n, s in sorted(found.items())])


def legacy_refs(ctx: Ctx) -> Reply:
    """``GET /git/refs[/{ref}]``: the exact ref, else the refs under it (pre-2020 behaviour)."""
    repo = ctx.repo(permission="contents")
    name = "refs/" + ctx.params.get("ref", "")
    found = _refs(repo, name)
    if name in found:
        return Reply(200, render.git_ref(ctx.urls, repo, name, found[name]))
    if not found:
        raise not_found()
    return paginate(ctx, [render.git_ref(ctx.urls, repo, n, s) for n, s in sorted(found.items())])


def create_ref(ctx: Ctx) -> Reply:
    repo = ctx.repo(**WRITE)
    body = ctx.json()
    ref, sha = body.get("ref"), body.get("sha")
    if not isinstance(ref, str) or not ref.startswith("refs/") or ref.count("/") < 2:
        raise ApiError(422, "Reference name must start with 'refs/' and have at least two slashes.")
    if not isinstance(sha, str):
        raise ApiError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
    _empty_check(repo)
    git = open_git(repo)
    if git.resolve(sha) != sha:
        raise ApiError(422, "Object does not exist")
    try:
        git.create_ref(ref, sha)
    except RefConflict:
        raise ApiError(422, "Reference already exists") from None
    except GitError as exc:
        raise ApiError(422, f"Invalid reference: {exc}") from None
    refs_updated(ctx.emu, repo, ctx.actor(), [RefChange(ref, None, sha)])
    return Reply(
        201,
        render.git_ref(ctx.urls, repo, ref, sha),
        {"location": f"{ctx.urls.repo_api(repo)}/git/{ref}"},
    )


def update_ref(ctx: Ctx) -> Reply:
    repo = ctx.repo(**WRITE)
    body = ctx.json()
    name = "refs/" + ctx.params["ref"]
    sha, force = body.get("sha"), bool(body.get("force", False))
    if not isinstance(sha, str):
        raise ApiError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
    git = open_git(repo)
    old = _refs(repo, name).get(name)
    if old is None:
        raise ApiError(422, "Reference does not exist")
    if git.resolve(sha) != sha:
        raise ApiError(422, "Object does not exist")
    try:
        git.update_ref(name, sha, old_sha=old, force=force)
    except NotFastForward:
        raise ApiError(422, "Update is not a fast forward") from None
    except RefConflict:
        raise ApiError(409, "Reference cannot be updated") from None
    if old != sha:
        refs_updated(ctx.emu, repo, ctx.actor(), [RefChange(name, old, sha)])
    return Reply(200, render.git_ref(ctx.urls, repo, name, sha))


def delete_ref(ctx: Ctx) -> Reply:
    repo = ctx.repo(**WRITE)
    name = "refs/" + ctx.params["ref"]
    git = open_git(repo)
    old = _refs(repo, name).get(name)
    if old is None:
        raise ApiError(422, "Reference does not exist")
    try:
        git.delete_ref(name, old)
    except (RefConflict, ObjectNotFound):
        raise ApiError(422, "Reference does not exist") from None
    refs_updated(ctx.emu, repo, ctx.actor(), [RefChange(name, old, None)])
    return Reply(204)


ROUTES = [
    Spec("GET", "/repos/{owner}/{repo}/git/ref/{ref}", get_ref),
    Spec("GET", "/repos/{owner}/{repo}/git/matching-refs/{ref}", matching_refs),
    Spec("GET", "/repos/{owner}/{repo}/git/refs", legacy_refs),
    Spec("GET", "/repos/{owner}/{repo}/git/refs/{ref}", legacy_refs),
    Spec("POST", "/repos/{owner}/{repo}/git/refs", create_ref),
    Spec("PATCH", "/repos/{owner}/{repo}/git/refs/{ref}", update_ref),
    Spec("DELETE", "/repos/{owner}/{repo}/git/refs/{ref}", delete_ref),
]
