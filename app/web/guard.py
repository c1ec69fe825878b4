"""Every request to the dashboard and the API passes here: who is it (session
cookie or API token), may they see this, and is a state change really theirs
(CSRF)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.config import Settings
from app.engine import Store
from app.operations.api_tokens import verify_token
from app.web.access import Principal, RepoAccess
from app.web.session import SESSION_COOKIE, SessionCodec
from app.web.signouts import is_signed_out

Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, Principal], Awaitable[Response]]


class Guard:
    def __init__(
        self, settings: Settings, store: Store, access: RepoAccess, codec: SessionCodec
    ) -> None:
        self.settings = settings
        self.store = store
        self.access = access
        self.codec = codec
        self.origin = _origin(settings.public_url)

    async def principal(self, request: Request) -> Principal | None:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and credential:
            record = await asyncio.to_thread(verify_token, self.store, credential.strip())
            if record is None:
                return None
            return Principal("token", f"token:{record.name}", record.scopes)
        session = self.codec.load(request.cookies.get(SESSION_COOKIE))
        if session is None:
            return None
        if await asyncio.to_thread(is_signed_out, self.store, session.sid):
            return None  # a copy of a cookie whose sign-in has ended
        reach = await self.access.repositories(session.github_token)
        return Principal(
            "user", session.login, frozenset({"read", "act"}), session=session, reach=reach
        )

    def csrf_ok(self, request: Request, principal: Principal, submitted: str | None) -> bool:
        """A token-authenticated request carries no ambient credential: nothing to
        forge. A cookie-authenticated one must echo the session's CSRF token and,
        when the browser says where it comes from, come from our own origin."""
        if principal.kind == "token":
            return True
        assert principal.session is not None
        origin = request.headers.get("origin")
        if origin and origin != "null" and self.origin and origin != self.origin:
            return False
        given = submitted or request.headers.get("x-csrf-token") or ""
        return hmac.compare_digest(given.encode(), principal.session.csrf.encode())

    def page(self, handler: Handler, *, scope: str = "read") -> Endpoint:
        """An HTML endpoint: people without a session are sent to sign in."""

        async def endpoint(request: Request) -> Response:
            principal = await self.principal(request)
            if principal is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
            if scope not in principal.scopes:
                return Response("this token may not do that", status_code=403)
            return await handler(request, principal)

        return endpoint

    def api(self, handler: Handler, *, scope: str = "read") -> Endpoint:
        """A JSON endpoint: 401 without credentials, 403 without the scope."""

        async def endpoint(request: Request) -> Response:
            principal = await self.principal(request)
            if principal is None:
                return JSONResponse(
                    {"message": "sign in, or send an API token as 'Authorization: Bearer'"},
                    status_code=401,
                    headers={"www-authenticate": 'Bearer realm="repairbot"'},
                )
            if scope not in principal.scopes:
                return JSONResponse({"message": f"needs the {scope!r} scope"}, status_code=403)
            return await handler(request, principal)

        return endpoint


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
