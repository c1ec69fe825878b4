"""World-building operations behind the control API: things GitHub's REST API
cannot do for a test (register an app, install it, create users with tokens,
seed a repository from a folder, push as a user, mark a PR ready).

Each function runs under the store lock and announces what GitHub would.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.git import BareRepo, Identity, NotFastForward, RefConflict
from emulator.gitview import RefChange, open_git, pull_git, refs_updated
from emulator.render import base, repos
from emulator.render.base import noreply_email
from emulator.rest.http import ApiError
from emulator.rest.pulls import find_pull, ready_for_review
from emulator.state import (
    DEFAULT_APP_EVENTS,
    DEFAULT_APP_PERMISSIONS,
    ROLE_RANK,
    App,
    Installation,
    Repo,
    Token,
    User,
)

if TYPE_CHECKING:
    from pathlib import Path

    from emulator.app import Emulator

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _user(emu: Emulator, login: str) -> User:
    user = emu.store.user(login)
    if user is None:
        raise ApiError(404, f"No such user: {login}")
    return user


def create_user(emu: Emulator, body: dict[str, Any]) -> dict[str, Any]:
    login = str(body.get("login", ""))
    if not _NAME.match(login):
        raise ApiError(422, "login must be a GitHub-style name")
    store = emu.store
    user = store.user(login) or store.add_user(
        login,
        type="Organization" if body.get("type") == "Organization" else "User",
        name=body.get("name"),
        email=body.get("email"),
    )
    token = store.mint_token(
        Token(
            value=store.new_token_value("ghu_"), kind="user", expires_at=None, user_login=user.login
        )
    )
    return {"id": user.id, "login": user.login, "type": user.type, "token": token.value}


def create_app(emu: Emulator, body: dict[str, Any]) -> dict[str, Any]:
    store = emu.store
    private_pem: str | None = None
    if body.get("public_key_pem"):
        key = serialization.load_pem_public_key(str(body["public_key_pem"]).encode())
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        key = private.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise ApiError(422, "public_key_pem must be an RSA public key")
    app_id = int(body.get("id") or store.next_id("app"))
    if app_id in store.apps:
        raise ApiError(422, f"App {app_id} already exists")
    slug = str(body.get("slug") or body.get("name") or f"app-{app_id}").lower().replace(" ", "-")
    owner_login = str(body.get("owner") or "emulator-apps")
    owner = store.user(owner_login) or store.add_user(owner_login, type="Organization")
    app = App(
        id=app_id,
        slug=slug,
        name=str(body.get("name") or slug),
        owner=owner,
        public_key=key,
        permissions=dict(body.get("permissions") or DEFAULT_APP_PERMISSIONS),
        events=list(body.get("events") or DEFAULT_APP_EVENTS),
        webhook_url=body.get("webhook_url"),
        webhook_secret=body.get("webhook_secret"),
        created_at=store.now(),
        client_id=f"Iv1.{app_id:016x}",
        client_secret=secrets.token_hex(20),
        callback_urls=[str(u) for u in body.get("callback_urls") or []],
        url=str(body.get("url") or ""),
        description=str(body.get("description") or ""),
    )
    store.apps[app.id] = app
    emu.bot_user(app)
    out: dict[str, Any] = {
        "id": app.id,
        "slug": app.slug,
        "name": app.name,
        "client_id": app.client_id,
        "client_secret": app.client_secret,
    }
    if private_pem is not None:
        out["private_key_pem"] = private_pem
    return out


def _installation(emu: Emulator, inst_id: int) -> Installation:
    inst = emu.store.installations.get(inst_id)
    if inst is None:
        raise ApiError(404, f"No such installation: {inst_id}")
    return inst


def _repos_named(emu: Emulator, account: User, names: list[Any]) -> list[Repo]:
    found = []
    for name in names:
        repo = emu.store.repo(account.login, str(name).split("/")[-1])
        if repo is None:
            raise ApiError(404, f"No such repository: {account.login}/{name}")
        found.append(repo)
    return found


def _covered(emu: Emulator, inst: Installation) -> list[Repo]:
    return [r for r in emu.store.repos.values() if inst in emu.store.installations_for(r)]


def create_installation(emu: Emulator, body: dict[str, Any]) -> dict[str, Any]:
    store = emu.store
    app = store.apps.get(int(body.get("app_id", 0)))
    if app is None:
        raise ApiError(404, "No such app")
    account = _user(emu, str(body.get("account", "")))
    names = body.get("repositories")
    repo_ids = None if names is None else {r.id for r in _repos_named(emu, account, list(names))}
    now = store.now()
    inst = Installation(
        id=int(body.get("id") or store.next_id("installation")),
        app_id=app.id,
        account=account,
        repo_ids=repo_ids,
        permissions=dict(body.get("permissions") or app.permissions),
        events=list(body.get("events") or app.events),
        created_at=now,
        updated_at=now,
    )
    store.installations[inst.id] = inst
    sender = _user(emu, str(body.get("sender") or account.login))
    urls = emu.webhook_urls()
    emu.events.for_installation(
        inst,
        "installation",
        {
            "action": "created",
            "installation": base.installation(urls, inst, app),
            "repositories": [repos.repository_brief(r) for r in _covered(emu, inst)],
            "requester": None,
        },
        sender=sender,
    )
    return {"id": inst.id, "app_id": app.id, "account": account.login}


def change_installation_repositories(
    emu: Emulator, inst_id: int, body: dict[str, Any]
) -> dict[str, Any]:
    inst = _installation(emu, inst_id)
    if inst.repo_ids is None:
        raise ApiError(422, "Installation covers all repositories; it has no selection to change")
    added = [
        r
        for r in _repos_named(emu, inst.account, list(body.get("add") or []))
        if r.id not in inst.repo_ids
    ]
    removed = [
        r
        for r in _repos_named(emu, inst.account, list(body.get("remove") or []))
        if r.id in inst.repo_ids
    ]
    inst.repo_ids |= {r.id for r in added}
    inst.repo_ids -= {r.id for r in removed}
    inst.updated_at = emu.store.now()
    sender = inst.account
    urls = emu.webhook_urls()
    app = emu.store.apps[inst.app_id]
    for action, items in (("added", added), ("removed", removed)):
        if items:
            emu.events.for_installation(
                inst,
                "installation_repositories",
                {
                    "action": action,
                    "installation": base.installation(urls, inst, app),
                    "repository_selection": inst.repository_selection,
                    "repositories_added": [repos.repository_brief(r) for r in added]
                    if action == "added"
                    else [],
                    "repositories_removed": [repos.repository_brief(r) for r in removed]
                    if action == "removed"
                    else [],
                    "requester": base.user(urls, sender),
                },
                sender=sender,
            )
    return {"id": inst.id, "repositories": sorted(r.full_name for r in _covered(emu, inst))}


def delete_installation(emu: Emulator, inst_id: int) -> dict[str, Any]:
    inst = _installation(emu, inst_id)
    urls = emu.webhook_urls()
    covered = _covered(emu, inst)
    del emu.store.installations[inst.id]
    for value, token in list(emu.store.tokens.items()):
        if token.installation_id == inst.id:
            del emu.store.tokens[value]
    emu.events.for_installation(
        inst,
        "installation",
        {
            "action": "deleted",
            "installation": base.installation(urls, inst, emu.store.apps[inst.app_id]),
            "repositories": [repos.repository_brief(r) for r in covered],
        },
        sender=inst.account,
    )
    return {"id": inst.id, "deleted": True}


def create_repo(emu: Emulator, body: dict[str, Any]) -> dict[str, Any]:
    store = emu.store
    owner = _user(emu, str(body.get("owner", "")))
    name = str(body.get("name", ""))
    if not _NAME.match(name) or name.endswith(".git"):
        raise ApiError(422, "name must be a GitHub-style repository name")
    if store.repo(owner.login, name) is not None:
        raise ApiError(422, "Repository already exists")
    default_branch = str(body.get("default_branch") or "main")
    path: Path = store.root / "repos" / owner.login.lower() / f"{name.lower()}.git"
    source = body.get("source")
    from pathlib import Path as _Path

    BareRepo.create(path, source=_Path(source) if source else None, default_branch=default_branch)
    now = store.now()
    repo = Repo(
        id=store.next_id("repo"),
        owner=owner,
        name=name,
        path=path,
        default_branch=default_branch,
        private=bool(body.get("private", False)),
        created_at=now,
        updated_at=now,
        pushed_at=now,
        description=body.get("description"),
    )
    store.repos[repo.full_name.lower()] = repo
    urls = emu.webhook_urls()
    return {
        "id": repo.id,
        "full_name": repo.full_name,
        "clone_url": f"{urls.web}/{repo.full_name}.git",
        "default_branch": default_branch,
        "head": open_git(repo).resolve(f"refs/heads/{default_branch}"),
    }


def _repo(emu: Emulator, owner: str, name: str) -> Repo:
    repo = emu.store.repo(owner, name)
    if repo is None:
        raise ApiError(404, f"No such repository: {owner}/{name}")
    return repo


def set_permission(
    emu: Emulator, owner: str, name: str, login: str, body: dict[str, Any]
) -> dict[str, Any]:
    repo = _repo(emu, owner, name)
    user = _user(emu, login)
    role = str(body.get("permission", "write"))
    if role not in ROLE_RANK:
        raise ApiError(422, f"permission must be one of {sorted(ROLE_RANK)}")
    if role == "none":
        repo.collaborators.pop(user.login.lower(), None)
    else:
        repo.collaborators[user.login.lower()] = role
    return {"login": user.login, "permission": role}


def push_as(emu: Emulator, owner: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A commit written and pushed by a user, exactly as a ``git push`` would land."""
    repo = _repo(emu, owner, name)
    user = _user(emu, str(body.get("as", "")))
    if ROLE_RANK[repo.role_of(user.login)] < ROLE_RANK["write"]:
        raise ApiError(403, f"{user.login} cannot push to {repo.full_name}")
    branch = str(body.get("branch") or repo.default_branch)
    ref = f"refs/heads/{branch}"
    git = open_git(repo)
    before = git.resolve(ref) if git.list_refs(ref).get(ref) else None
    parent = body.get("parent") or before or git.resolve(f"refs/heads/{repo.default_branch}")
    files = {
        str(k): (None if v is None else str(v).encode())
        for k, v in dict(body.get("files") or {}).items()
    }
    who = Identity(user.name or user.login, user.email or noreply_email(user), body.get("date"))
    sha = git.write_commit(
        parent, files, str(body.get("message") or f"Update by {user.login}"), who
    )
    try:
        git.update_ref(ref, sha, old_sha=before or "", force=bool(body.get("force", False)))
    except (NotFastForward, RefConflict) as exc:
        raise ApiError(409, f"push rejected: {exc}") from None
    refs_updated(emu, repo, user, [RefChange(ref, before, sha)])
    return {"ref": ref, "before": before, "sha": sha}


def repo_settings(emu: Emulator, owner: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Plan-level switches GitHub decides per repository.

    ``drafts_supported``: false models a private repository on a plan without
    draft pull requests (creating one answers 422).
    """
    repo = _repo(emu, owner, name)
    if "drafts_supported" in body:
        repo.drafts_supported = bool(body["drafts_supported"])
    return {"drafts_supported": repo.drafts_supported}


def mergeable_unknown(
    emu: Emulator, owner: str, name: str, number: int, body: dict[str, Any]
) -> dict[str, Any]:
    """The next ``reads`` reads of the pull request answer ``mergeable: null``
    (GitHub still computing mergeability in the background)."""
    pr = find_pull(_repo(emu, owner, name), number)
    pr.mergeable_unknown_reads = max(0, int(body.get("reads", 1)))
    return {"number": pr.number, "mergeable_unknown_reads": pr.mergeable_unknown_reads}


def delete_issue(
    emu: Emulator, owner: str, name: str, number: int, body: dict[str, Any]
) -> dict[str, Any]:
    """GitHub's GraphQL ``deleteIssue``, by a repository admin."""
    from emulator.moves import delete_issue as delete
    from emulator.rest.issues import find_issue

    repo, user = _repo(emu, owner, name), _user(emu, str(body.get("as", "")))
    if ROLE_RANK[repo.role_of(user.login)] < ROLE_RANK["admin"]:
        raise ApiError(403, f"{user.login} cannot delete issues of {repo.full_name}")
    delete(emu, repo, find_issue(repo, number), user)
    return {"deleted": number}


def transfer_issue(
    emu: Emulator, owner: str, name: str, number: int, body: dict[str, Any]
) -> dict[str, Any]:
    """GitHub's GraphQL ``transferIssue`` ``{as, repository: "owner/name"}``
    (write access to both repositories, same owner)."""
    from emulator.moves import transfer_issue as transfer
    from emulator.rest.issues import find_issue

    repo, user = _repo(emu, owner, name), _user(emu, str(body.get("as", "")))
    target_owner, _, target_name = str(body.get("repository", "")).partition("/")
    target = _repo(emu, target_owner, target_name)
    for side in (repo, target):
        if ROLE_RANK[side.role_of(user.login)] < ROLE_RANK["write"]:
            raise ApiError(403, f"{user.login} cannot transfer issues with {side.full_name}")
    if target.owner.id != repo.owner.id or target is repo:
        raise ApiError(422, "an issue moves only to another repository of the same owner")
    moved = transfer(emu, repo, find_issue(repo, number), target, user)
    return {"repository": target.full_name, "number": moved.number}


def suspend_installation(emu: Emulator, inst_id: int, suspended: bool) -> dict[str, Any]:
    from emulator.moves import set_suspended

    inst = _installation(emu, inst_id)
    set_suspended(emu, inst, suspended, inst.account)
    return {"id": inst.id, "suspended": inst.suspended_at is not None}


def mark_ready(
    emu: Emulator, owner: str, name: str, number: int, body: dict[str, Any]
) -> dict[str, Any]:
    repo = _repo(emu, owner, name)
    user = _user(emu, str(body.get("as", "")))
    pr = find_pull(repo, number)
    ready_for_review(emu, repo, pr, user)
    return {
        "number": pr.number,
        "draft": pr.draft,
        "head_sha": pull_git(repo, pr, mergeable=False).head_sha,
    }
