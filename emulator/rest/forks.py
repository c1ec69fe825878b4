"""Forks: ``POST /repos/{o}/{r}/forks`` and ``GET /repos/{o}/{r}/forks``.

As on GitHub, forking is asynchronous: the answer is 202 with the new
repository, which then answers 404 (REST and git) for a few requests
(``Store.fork_pending_requests``, set through the control API) before it
exists. Asking again for a fork the account already has answers 202 with
that fork, whatever ``name`` says. An installation forks into its own
account; into an organization (``organization``) only with ``administration:
write`` there. A fork's pull requests are opened on the base repository with
``head=<fork owner>:<branch>`` (see ``emulator.rest.pulls``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emulator.auth import can_see, installation_level
from emulator.git import BareRepo
from emulator.render import repos as render
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import LEVEL_RANK, Repo, User

if TYPE_CHECKING:
    from emulator.app import Emulator


def _source(ctx: Ctx) -> Repo:
    """The repository to fork: public ones are readable with any token."""
    repo = ctx.emu.store.repo(ctx.params["owner"], ctx.params["repo"])
    if repo is None or (repo.private and not can_see(ctx.emu.store, ctx.principal, repo)):
        raise not_found()
    if ctx.emu.store.arriving(repo):
        raise not_found()
    return repo


def _account(ctx: Ctx, organization: object) -> User:
    """Where the fork goes: the organization named, or the caller's own account."""
    store, principal = ctx.emu.store, ctx.principal
    if organization is not None:
        if not isinstance(organization, str):
            raise validation(resource="Repository", code="invalid", field="organization")
        org = store.user(organization)
        if org is None or org.type != "Organization":
            raise validation(resource="Repository", code="invalid", field="organization")
        if principal.kind != "installation" or principal.installation is None:
            raise ApiError(403, "You do not have permission to fork into this organization")
        if principal.installation.account.id != org.id:
            raise ApiError(403, "Resource not accessible by integration")
        return org
    if principal.kind == "installation" and principal.installation is not None:
        return principal.installation.account
    if principal.user is not None:
        return principal.user
    raise ApiError(401, "Requires authentication")


def _free_name(ctx: Ctx, account: User, wanted: str) -> str:
    """GitHub appends ``-1``, ``-2``... when the account already has the name."""
    name, n = wanted, 0
    while ctx.emu.store.repo(account.login, name) is not None:
        n += 1
        name = f"{wanted}-{n}"
    return name


def make_fork(emu: Emulator, source: Repo, account: User, name: str, *, all_branches: bool) -> Repo:
    store = emu.store
    path = store.root / "repos" / account.login.lower() / f"{name.lower()}.git"
    BareRepo.fork(
        path,
        BareRepo(source.path),
        default_branch=source.default_branch,
        all_branches=all_branches,
    )
    now = store.now()
    fork = Repo(
        id=store.next_id("repo"),
        owner=account,
        name=name,
        path=path,
        default_branch=source.default_branch,
        private=source.private,
        created_at=now,
        updated_at=now,
        pushed_at=now,
        description=source.description,
        parent=source,
        source=source.network_root,
        pending_requests=store.fork_pending_requests,
    )
    store.repos[fork.full_name.lower()] = fork
    source.forks_count += 1
    return fork


def create_fork(ctx: Ctx) -> Reply:
    source = _source(ctx)
    body = ctx.json()
    account = _account(ctx, body.get("organization"))
    if account.id == source.owner.id:
        raise validation(resource="Repository", code="custom", message="Cannot fork to the owner")
    if (
        ctx.principal.kind == "installation"
        and installation_level(ctx.principal, "administration") < LEVEL_RANK["write"]
    ):
        raise ApiError(403, "Resource not accessible by integration")
    store = ctx.emu.store
    fork = store.fork_of(source, account)
    if fork is None:
        wanted = body.get("name") or source.name
        if not isinstance(wanted, str) or not wanted:
            raise validation(resource="Repository", code="invalid", field="name")
        fork = make_fork(
            ctx.emu,
            source,
            account,
            _free_name(ctx, account, wanted),
            all_branches=not body.get("default_branch_only", False),
        )
    return Reply(202, render.full_repository(ctx.urls, fork))


def list_forks(ctx: Ctx) -> Reply:
    source = ctx.repo()
    store = ctx.emu.store
    found = [
        r
        for r in store.repos.values()
        if r.parent is source
        and r.pending_requests <= 0
        and (not r.private or can_see(store, ctx.principal, r))
    ]
    found.sort(key=lambda r: r.created_at, reverse=True)
    return paginate(ctx, [render.repository(ctx.urls, r) for r in found])


ROUTES = [
    Spec("POST", "/repos/{owner}/{repo}/forks", create_fork),
    Spec("GET", "/repos/{owner}/{repo}/forks", list_forks),
]
