"""GitHub's web pages that the app's flows pass through (not the REST API):

- the user authorization of an App (OAuth web flow): ``GET
  /login/oauth/authorize`` shows a sign-in page, its form answers with a
  redirect to the App's callback carrying ``code`` and ``state``, and ``POST
  /login/oauth/access_token`` trades the code (with the client secret) for a
  user token (``ghu_``, eight hours);
- App registration from a manifest: ``POST /settings/apps/new`` (or
  ``/organizations/{org}/settings/apps/new``) receives the manifest form,
  shows a confirmation page, and creating the App redirects to the manifest's
  ``redirect_url`` with a one-hour ``code`` for
  ``POST /app-manifests/{code}/conversions`` (emulator/rest/apps.py).

Nobody is "logged in" to the emulator: the sign-in page asks which user you
are. It is a test harness; the people exist only in it.
"""

from __future__ import annotations

import base64
import html
import json
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from emulator import scripting
from emulator.rest.http import ApiError
from emulator.state import Grant, Token

if TYPE_CHECKING:
    from emulator.app import Emulator

CODE_TTL = timedelta(minutes=10)
MANIFEST_CODE_TTL = timedelta(hours=1)
USER_TOKEN_TTL = timedelta(hours=8)
#: The manifest keys GitHub reads (others are ignored).
MANIFEST_KEYS = (
    "name",
    "url",
    "hook_attributes",
    "redirect_url",
    "callback_urls",
    "setup_url",
    "description",
    "public",
    "default_events",
    "default_permissions",
    "request_oauth_on_install",
    "setup_on_update",
)


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title></head><body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>",
        status_code=status,
    )


def _hidden(**fields: str) -> str:
    return "".join(
        f"<input type='hidden' name='{html.escape(k)}' value='{html.escape(v)}'>"
        for k, v in fields.items()
    )


def _with_query(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + urlencode(params)


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode()
    if request.headers.get("content-type", "").startswith("application/json"):
        data = json.loads(raw or "{}")
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    return dict(parse_qsl(raw, keep_blank_values=True))


def routes(emu: Emulator) -> list[BaseRoute]:
    store = emu.store

    def app_by_client(client_id: str) -> Any:
        return next((a for a in store.apps.values() if a.client_id == client_id), None)

    async def authorize_page(request: Request) -> Response:
        q = request.query_params
        with store.lock:
            app = app_by_client(q.get("client_id", ""))
        if app is None:
            return _page("Not found", "<p>No application with that client id.</p>", 404)
        redirect_uri = q.get("redirect_uri") or (app.callback_urls or [""])[0]
        if app.callback_urls and not any(redirect_uri.startswith(u) for u in app.callback_urls):
            return _page(
                "Redirect URI mismatch",
                "<p>The redirect_uri is not a callback URL of this application.</p>",
                400,
            )
        form = (
            f"<p>Sign in to continue to <strong>{html.escape(app.name)}</strong>.</p>"
            "<form method='post' action='/login/oauth/authorize'>"
            + _hidden(client_id=app.client_id, redirect_uri=redirect_uri, state=q.get("state", ""))
            + "<label for='login'>Username</label> <input id='login' name='login' required> "
            "<button type='submit'>Authorize</button></form>"
        )
        return _page(f"Authorize {app.name}", form)

    async def authorize(request: Request) -> Response:
        f = await _form(request)
        with store.lock:
            app = app_by_client(f.get("client_id", ""))
            user = store.user(f.get("login", ""))
            if app is None:
                return _page("Not found", "<p>No application with that client id.</p>", 404)
            if user is None or user.type != "User":
                return _page("Sign-in failed", "<p>Incorrect username.</p>", 401)
            code = secrets.token_hex(10)
            store.grants[code] = Grant(
                code=code,
                kind="oauth",
                expires_at=store.now() + CODE_TTL,
                app_id=app.id,
                user_login=user.login,
                redirect_uri=f.get("redirect_uri", ""),
            )
        target = _with_query(f.get("redirect_uri", ""), code=code, state=f.get("state", ""))
        return RedirectResponse(target, status_code=302)

    async def access_token(request: Request) -> Response:
        f = await _form(request)
        with store.lock:
            answer = _exchange(f)
        if "json" in request.headers.get("accept", ""):
            return JSONResponse(answer)
        return Response(urlencode(answer), media_type="application/x-www-form-urlencoded")

    def _exchange(f: dict[str, str]) -> dict[str, Any]:
        # GitHub answers 200 with an "error" for every refusal of this endpoint.
        app = app_by_client(f.get("client_id", ""))
        if app is None or not secrets.compare_digest(f.get("client_secret", ""), app.client_secret):
            return {
                "error": "incorrect_client_credentials",
                "error_description": "The client_id and/or client_secret passed are incorrect.",
            }
        grant = store.grants.pop(f.get("code", ""), None)
        bad_code = {
            "error": "bad_verification_code",
            "error_description": "The code passed is incorrect or expired.",
        }
        if grant is None or grant.kind != "oauth" or grant.app_id != app.id:
            return bad_code
        if grant.expires_at <= store.now():
            return bad_code
        if f.get("redirect_uri") and f["redirect_uri"] != grant.redirect_uri:
            return {
                "error": "redirect_uri_mismatch",
                "error_description": "The redirect_uri MUST match the registered callback URL.",
            }
        token = store.mint_token(
            Token(
                value=store.new_token_value("ghu_"),
                kind="user",
                expires_at=store.now() + USER_TOKEN_TTL,
                user_login=grant.user_login,
                app_id=app.id,
            )
        )
        return {
            "access_token": token.value,
            "expires_in": int(USER_TOKEN_TTL.total_seconds()),
            "refresh_token": store.new_token_value("ghr_"),
            "refresh_token_expires_in": 15897600,
            "scope": "",
            "token_type": "bearer",
        }

    async def new_app_page(request: Request) -> Response:
        f = await _form(request)
        try:
            manifest = json.loads(f.get("manifest", ""))
        except ValueError:
            return _page("Invalid manifest", "<p>The manifest is not JSON.</p>", 422)
        if not isinstance(manifest, dict) or not manifest.get("url"):
            return _page("Invalid manifest", "<p>The manifest needs at least a url.</p>", 422)
        org = request.path_params.get("org", "")
        state = request.query_params.get("state", "")
        body = (
            f"<p>Create <strong>{html.escape(str(manifest.get('name', '')))}</strong>"
            f" for {html.escape(org or 'your account')}?</p>"
            f"<pre>{html.escape(json.dumps(manifest, indent=2))}</pre>"
            "<form method='post' action='/settings/apps/new/create'>"
            + _hidden(manifest=json.dumps(manifest), state=state, org=org)
            + (
                ""
                if org
                else "<label for='owner'>Your username</label> <input id='owner' "
                "name='owner' required> "
            )
            + "<button type='submit'>Create GitHub App</button></form>"
        )
        return _page("Create GitHub App", body)

    async def create_from_manifest(request: Request) -> Response:
        f = await _form(request)
        manifest = {k: v for k, v in json.loads(f["manifest"]).items() if k in MANIFEST_KEYS}
        owner = f.get("org") or f.get("owner", "")
        hook = manifest.get("hook_attributes") or {}
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        public = private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        with store.lock:
            if store.user(owner) is None:
                return _page("Not found", f"<p>No account {html.escape(owner)}.</p>", 404)
            slug = str(manifest.get("name") or "").lower().replace(" ", "-")
            if not slug or any(a.slug == slug for a in store.apps.values()):
                return _page("Name taken", "<p>Name is already in use.</p>", 422)
            try:
                created = scripting.create_app(
                    emu,
                    {
                        "name": manifest.get("name"),
                        "owner": owner,
                        "public_key_pem": public.decode(),
                        "permissions": manifest.get("default_permissions") or {"metadata": "read"},
                        "events": manifest.get("default_events") or [],
                        "webhook_url": hook.get("url"),
                        "webhook_secret": secrets.token_hex(20),
                        "callback_urls": manifest.get("callback_urls") or [],
                        "url": manifest.get("url"),
                        "description": manifest.get("description") or "",
                    },
                )
            except ApiError as exc:
                return _page("Invalid manifest", f"<p>{html.escape(exc.message)}</p>", exc.status)
            code = secrets.token_hex(10)
            store.grants[code] = Grant(
                code=code,
                kind="manifest",
                expires_at=store.now() + MANIFEST_CODE_TTL,
                app_id=created["id"],
                private_key_pem=pem,
            )
        redirect = str(manifest.get("redirect_url") or "")
        if not redirect:
            return _page("App created", f"<p>Conversion code: <code>{code}</code></p>")
        return RedirectResponse(
            _with_query(redirect, code=code, state=f.get("state", "")), status_code=302
        )

    async def install_page(request: Request) -> Response:
        """``/apps/{slug}/installations/new``, the link an App's page and
        ``repairbot register`` give: choose the account to install it on."""
        slug = request.path_params["slug"]
        with store.lock:
            app = next((a for a in store.apps.values() if a.slug == slug), None)
        if app is None:
            return _page("Not found", "<p>No application with that name.</p>", 404)
        return _page(
            f"Install {app.name}",
            f"<p>Install <strong>{html.escape(app.name)}</strong> on an account; it gets "
            "every repository of that account.</p>"
            f"<form method='post' action='/apps/{html.escape(slug)}/installations/new'>"
            "<label for='account'>Account</label> <input id='account' name='account' required> "
            "<button type='submit'>Install</button></form>",
        )

    async def install(request: Request) -> Response:
        from emulator import scripting
        from emulator.rest.http import ApiError

        slug = request.path_params["slug"]
        f = await request.form()
        account = str(f.get("account", ""))
        with store.lock:
            app = next((a for a in store.apps.values() if a.slug == slug), None)
            if app is None:
                return _page("Not found", "<p>No application with that name.</p>", 404)
            try:
                made = scripting.create_installation(emu, {"app_id": app.id, "account": account})
            except ApiError as exc:
                return _page("Not installed", f"<p>{html.escape(exc.message)}</p>", exc.status)
        return _page(
            "Installed",
            f"<p>{html.escape(app.name)} is installed on {html.escape(account)} "
            f"(installation {made['id']}).</p>",
        )

    return [
        Route("/apps/{slug}/installations/new", install_page, methods=["GET"]),
        Route("/apps/{slug}/installations/new", install, methods=["POST"]),
        Route("/login/oauth/authorize", authorize_page, methods=["GET"]),
        Route("/login/oauth/authorize", authorize, methods=["POST"]),
        Route("/login/oauth/access_token", access_token, methods=["POST"]),
        Route("/settings/apps/new", new_app_page, methods=["POST"]),
        Route("/organizations/{org}/settings/apps/new", new_app_page, methods=["POST"]),
        Route("/settings/apps/new/create", create_from_manifest, methods=["POST"]),
    ]


def revoke_token_route(emu: Emulator) -> BaseRoute:
    """``DELETE /applications/{client_id}/token`` (REST API): an App revokes a
    user token it issued, authenticated with its client id and secret (Basic).
    204 on success; 404 for wrong credentials or a token this App did not issue
    (as GitHub answers); 422 without ``access_token``. The token stops working
    at once."""
    store = emu.store

    async def revoke(request: Request) -> Response:
        client_id = request.path_params["client_id"]
        given_id, given_secret = _basic(request.headers.get("authorization", ""))
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return JSONResponse({"message": "Problems parsing JSON"}, status_code=400)
        token = body.get("access_token") if isinstance(body, dict) else None
        with store.lock:
            app = next((a for a in store.apps.values() if a.client_id == client_id), None)
            if (
                app is None
                or given_id != client_id
                or not secrets.compare_digest(given_secret, app.client_secret)
            ):
                return JSONResponse({"message": "Not Found"}, status_code=404)
            if not isinstance(token, str) or not token:
                return JSONResponse({"message": "Invalid request"}, status_code=422)
            found = store.tokens.get(token)
            if found is None or found.kind != "user" or found.app_id != app.id:
                return JSONResponse({"message": "Not Found"}, status_code=404)
            del store.tokens[token]
        return Response(status_code=204)

    return Route("/applications/{client_id}/token", revoke, methods=["DELETE"])


def _basic(header: str) -> tuple[str, str]:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return "", ""
    try:
        user, _, password = base64.b64decode(encoded.strip()).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return "", ""
    return user, password
