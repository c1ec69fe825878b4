"""GitHub App endpoints: the app itself, its installations, tokens and hook deliveries."""

from __future__ import annotations

from typing import Any

from emulator.render import base, repos
from emulator.rest.http import ApiError, Ctx, Reply, Spec, not_found, paginate, validation
from emulator.state import LEVEL_RANK, ROLE_RANK, App, Installation, Repo, Token, User


def _app(ctx: Ctx) -> App:
    assert ctx.principal.app is not None
    return ctx.principal.app


def get_app(ctx: Ctx) -> Reply:
    out = base.app(ctx.urls, _app(ctx))
    out["installations_count"] = sum(
        1 for i in ctx.emu.store.installations.values() if i.app_id == _app(ctx).id
    )
    return Reply(200, out)


def _own_installation(ctx: Ctx, installation_id: int) -> Installation:
    inst = ctx.emu.store.installations.get(installation_id)
    if inst is None or inst.app_id != _app(ctx).id:
        raise not_found()
    return inst


def list_installations(ctx: Ctx) -> Reply:
    app = _app(ctx)
    found = [i for i in ctx.emu.store.installations.values() if i.app_id == app.id]
    return paginate(ctx, [base.installation(ctx.urls, i, app) for i in found])


def get_installation(ctx: Ctx) -> Reply:
    inst = _own_installation(ctx, ctx.int_param("installation_id"))
    return Reply(200, base.installation(ctx.urls, inst, _app(ctx)))


def repo_installation(ctx: Ctx) -> Reply:
    repo = ctx.emu.store.repo(ctx.params["owner"], ctx.params["repo"])
    app = _app(ctx)
    if repo is None:
        raise not_found()
    for inst in ctx.emu.store.installations_for(repo):
        if inst.app_id == app.id:
            return Reply(200, base.installation(ctx.urls, inst, app))
    raise not_found()


def account_installation(ctx: Ctx) -> Reply:
    """``GET /orgs/{org}/installation`` and ``GET /users/{username}/installation``."""
    login = ctx.params.get("org") or ctx.params.get("username") or ""
    account = ctx.emu.store.user(login)
    app = _app(ctx)
    wants_org = "org" in ctx.params
    if account is None or (account.type == "Organization") != wants_org:
        raise not_found()
    for inst in ctx.emu.store.installations.values():
        if inst.app_id == app.id and inst.account.id == account.id:
            return Reply(200, base.installation(ctx.urls, inst, app))
    raise not_found()


def create_access_token(ctx: Ctx) -> Reply:
    store = ctx.emu.store
    inst = _own_installation(ctx, ctx.int_param("installation_id"))
    if inst.suspended_at is not None:
        raise ApiError(403, "This installation has been suspended")
    body = ctx.json()
    covered = [r for r in store.repos.values() if inst in store.installations_for(r)]
    repo_ids: set[int] | None = None
    names, ids = body.get("repositories"), body.get("repository_ids")
    if names or ids:
        wanted = {str(n).lower() for n in names or []}
        repo_ids = {r.id for r in covered if r.name.lower() in wanted or r.id in (ids or [])}
        if len(repo_ids) < len(wanted) + len(ids or []):
            raise validation(
                "There is at least one repository that does not exist"
                " or is not accessible to the parent installation."
            )
    permissions: dict[str, str] = {}
    requested: Any = body.get("permissions") or {}
    for name, level in dict(requested).items():
        if LEVEL_RANK.get(str(level), 99) > LEVEL_RANK.get(inst.permissions.get(name, "none"), 0):
            raise validation("The permissions requested are not granted to this installation.")
        permissions[name] = str(level)
    if permissions:
        # GitHub always includes read access to metadata in a narrowed token.
        permissions.setdefault("metadata", "read")
    token = store.mint_token(
        Token(
            value=store.new_token_value("ghs_"),
            kind="installation",
            expires_at=store.now() + store.token_ttl,
            installation_id=inst.id,
            permissions=permissions,
            repo_ids=repo_ids,
        )
    )
    shown = [r for r in covered if repo_ids is None or r.id in repo_ids]
    out: dict[str, Any] = {
        "token": token.value,
        "expires_at": base.ts(token.expires_at),
        "permissions": permissions or dict(inst.permissions),
        "repository_selection": "selected" if repo_ids is not None else inst.repository_selection,
    }
    if repo_ids is not None:
        out["repositories"] = [repos.repository(ctx.urls, r) for r in shown]
    return Reply(201, out)


def installation_repositories(ctx: Ctx) -> Reply:
    store = ctx.emu.store
    inst, token = ctx.principal.installation, ctx.principal.token
    if inst is None:
        raise ApiError(403, "This endpoint requires an installation token")
    found = [
        r
        for r in store.repos.values()
        if inst in store.installations_for(r)
        and (token is None or token.repo_ids is None or r.id in token.repo_ids)
    ]
    every = [repos.repository(ctx.urls, r) for r in found]
    return paginate(
        ctx,
        every,
        wrap=lambda chunk: {
            "total_count": len(every),
            "repositories": chunk,
            "repository_selection": inst.repository_selection,
        },
    )


# -- the user side: who signed in, and what they reach through the App --------------


def _user_of_app(ctx: Ctx) -> tuple[User, App | None]:
    principal = ctx.principal
    if principal.kind != "user" or principal.user is None:
        raise ApiError(401, "Requires authentication")
    app_id = principal.token.app_id if principal.token else None
    return principal.user, ctx.emu.store.apps.get(app_id) if app_id is not None else None


def authenticated_user(ctx: Ctx) -> Reply:
    user, _ = _user_of_app(ctx)
    return Reply(200, base.private_user(ctx.urls, user))


def _reachable(ctx: Ctx, user: User, inst: Installation) -> list[Repo]:
    """The installation's repositories the user has explicit access to (GitHub's rule)."""
    store = ctx.emu.store
    return [
        r
        for r in store.repos.values()
        if inst in store.installations_for(r) and ROLE_RANK[r.role_of(user.login)] >= 1
    ]


def user_installations(ctx: Ctx) -> Reply:
    user, app = _user_of_app(ctx)
    if app is None:
        raise ApiError(403, "You must authenticate with an access token authorized to a GitHub App")
    found = [
        i
        for i in ctx.emu.store.installations.values()
        if i.app_id == app.id and i.suspended_at is None and _reachable(ctx, user, i)
    ]
    every = [base.installation(ctx.urls, i, app) for i in found]
    return paginate(
        ctx, every, wrap=lambda chunk: {"total_count": len(every), "installations": chunk}
    )


def user_installation_repositories(ctx: Ctx) -> Reply:
    user, app = _user_of_app(ctx)
    inst = ctx.emu.store.installations.get(ctx.int_param("installation_id"))
    if app is None or inst is None or inst.app_id != app.id:
        raise not_found()
    every = []
    for r in _reachable(ctx, user, inst):
        rank = ROLE_RANK[r.role_of(user.login)]
        every.append(
            repos.repository(ctx.urls, r)
            | {
                "permissions": {
                    "admin": rank >= 5,
                    "maintain": rank >= 4,
                    "push": rank >= 3,
                    "triage": rank >= 2,
                    "pull": rank >= 1,
                }
            }
        )
    if not every:
        raise not_found()
    return paginate(
        ctx,
        every,
        wrap=lambda chunk: {
            "total_count": len(every),
            "repositories": chunk,
            "repository_selection": inst.repository_selection,
        },
    )


def manifest_conversion(ctx: Ctx) -> Reply:
    """``POST /app-manifests/{code}/conversions``: the new App's credentials, once."""
    store = ctx.emu.store
    grant = store.grants.get(ctx.params["code"])
    if grant is None or grant.kind != "manifest" or grant.expires_at <= store.now():
        raise not_found()
    del store.grants[grant.code]
    app = store.apps[grant.app_id]
    out = base.app(ctx.urls, app) | {
        "client_secret": app.client_secret,
        "webhook_secret": app.webhook_secret,
        "pem": grant.private_key_pem,
    }
    return Reply(201, out)


# -- hook deliveries (GitHub lets an app inspect and redeliver its own) --------------


def list_deliveries(ctx: Ctx) -> Reply:
    """Newest first, paged by cursor as GitHub does (``?cursor=`` from the
    ``Link`` header; ``page`` is not accepted here). Only attempted deliveries
    are listed: GitHub shows a delivery once it has been tried.
    ``status=success|failure`` filters on the status code (2xx-3xx / 4xx-5xx)."""
    app = _app(ctx)
    try:
        per_page = int(ctx.query.get("per_page", "30"))
    except ValueError:
        raise validation() from None
    if not 1 <= per_page <= 100:
        raise validation("per_page must be between 1 and 100")
    wanted = ctx.query.get("status")
    if wanted not in (None, "success", "failure"):
        raise validation("status must be success or failure")
    cursor = ctx.query.get("cursor")
    start: int | None = None
    if cursor is not None:
        if not cursor.startswith("v1_") or not cursor[3:].isdigit():
            raise ApiError(400, "Invalid cursor")
        start = int(cursor[3:])
    found = [
        d
        for d in reversed(ctx.emu.dispatcher.list())
        if d.app_id == app.id
        and d.delivered_at is not None
        and (start is None or d.id <= start)
        and (wanted is None or _outcome(d.status_code) == wanted)
    ]
    page, rest = found[:per_page], found[per_page:]
    out = []
    for d in page:
        item = d.to_json()
        del item["request"], item["response"], item["url"]
        out.append(item)
    headers = {}
    if rest:
        query = f"per_page={per_page}" + (f"&status={wanted}" if wanted else "")
        path = ctx.emu.base_path + ctx.params.get("__path__", "")
        headers["link"] = f'<{ctx.urls.web}{path}?{query}&cursor=v1_{rest[0].id}>; rel="next"'
    return Reply(200, out, headers)


def _outcome(status_code: int) -> str | None:
    if 200 <= status_code < 400:
        return "success"
    if 400 <= status_code < 600:
        return "failure"
    return None  # 0: no connection (GitHub's "failed to connect" matches neither)


def get_delivery(ctx: Ctx) -> Reply:
    d = ctx.emu.dispatcher.get(ctx.int_param("delivery_id"))
    if d is None or d.app_id != _app(ctx).id:
        raise not_found()
    return Reply(200, d.to_json())


def redeliver(ctx: Ctx) -> Reply:
    d = ctx.emu.dispatcher.get(ctx.int_param("delivery_id"))
    if d is None or d.app_id != _app(ctx).id:
        raise not_found()
    ctx.emu.dispatcher.redeliver(d.id)
    # GitHub answers 202 with an empty object and sends the attempt later.
    return Reply(202, {})


ROUTES = [
    Spec("GET", "/app", get_app, auth="jwt"),
    Spec("GET", "/app/installations", list_installations, auth="jwt"),
    Spec("GET", "/app/installations/{installation_id}", get_installation, auth="jwt"),
    Spec(
        "POST",
        "/app/installations/{installation_id}/access_tokens",
        create_access_token,
        auth="jwt",
    ),
    Spec("GET", "/repos/{owner}/{repo}/installation", repo_installation, auth="jwt"),
    Spec("GET", "/orgs/{org}/installation", account_installation, auth="jwt"),
    Spec("GET", "/users/{username}/installation", account_installation, auth="jwt"),
    Spec("GET", "/installation/repositories", installation_repositories),
    Spec("GET", "/user", authenticated_user),
    Spec("GET", "/user/installations", user_installations),
    Spec(
        "GET",
        "/user/installations/{installation_id}/repositories",
        user_installation_repositories,
    ),
    Spec("POST", "/app-manifests/{code}/conversions", manifest_conversion, auth="any"),
    Spec("GET", "/app/hook/deliveries", list_deliveries, auth="jwt"),
    Spec("GET", "/app/hook/deliveries/{delivery_id}", get_delivery, auth="jwt"),
    Spec("POST", "/app/hook/deliveries/{delivery_id}/attempts", redeliver, auth="jwt"),
]
