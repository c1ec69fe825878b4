"""Sign in with GitHub: the App's own user authorization (OAuth web flow).

``/login`` sends the browser to GitHub with a random ``state`` that is also
kept in a short-lived encrypted cookie; ``/auth/callback`` accepts the code
only when GitHub hands back that same state (so nobody can splice their own
sign-in into someone else's browser), trades it for a user token, asks GitHub
who that is, and sets the session cookie. ``/logout`` (a POST with the CSRF
token) ends the sign-in server side (app/web/signouts.py: the cookie, and any
copy of it, is refused from then on), revokes the user token at GitHub
(``DELETE /applications/{client_id}/token``), forgets what GitHub said about
the user's access, and clears the cookie.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from app.config import Settings
from app.web.access import RepoAccess
from app.web.guard import Endpoint, Guard
from app.web.session import LOGIN_COOKIE, LOGIN_TTL, SESSION_COOKIE, Session, SessionCodec
from app.web.signouts import sign_out

log = logging.getLogger("repairbot.web.oauth")


def safe_next(value: str | None) -> str:
    """Only paths on this site: ``//evil.example`` and absolute URLs become ``/``."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


class SignIn:
    def __init__(
        self,
        settings: Settings,
        codec: SessionCodec,
        access: RepoAccess,
        guard: Guard,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.codec = codec
        self.access = access
        self.guard = guard
        self.transport = transport
        self.secure = settings.public_url.startswith("https://")
        self.callback_url = f"{settings.public_url}/auth/callback"

    def _cookie(self, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name, value, max_age=max_age, httponly=True, secure=self.secure, samesite="lax"
        )

    async def login(self, request: Request) -> Response:
        state = secrets.token_urlsafe(32)
        query = urlencode(
            {
                "client_id": self.settings.github_client_id,
                "redirect_uri": self.callback_url,
                "state": state,
                "allow_signup": "false",
            }
        )
        response = RedirectResponse(
            f"{self.settings.github_web_url}/login/oauth/authorize?{query}", status_code=303
        )
        nxt = safe_next(request.query_params.get("next"))
        self._cookie(response, LOGIN_COOKIE, self.codec.dump_login(state, nxt), LOGIN_TTL)
        return response

    async def callback(self, request: Request) -> Response:
        kept = self.codec.load_login(request.cookies.get(LOGIN_COOKIE))
        state = request.query_params.get("state", "")
        code = request.query_params.get("code", "")
        if kept is None or not code or not hmac.compare_digest(kept[0].encode(), state.encode()):
            return Response(
                "Sign-in failed: the answer from GitHub does not match a sign-in started "
                "here (or it took longer than ten minutes). Try again from /login.",
                status_code=400,
            )
        token = await self._exchange(code)
        if token is None:
            return Response("Sign-in failed: GitHub refused the code.", status_code=400)
        async with self.access.client(token) as gh:
            me = (await gh.rest.users.async_get_authenticated()).parsed_data
        self.access.forget(token)
        session = Session.start(me.login, me.id, token)
        response = RedirectResponse(kept[1], status_code=303)
        response.delete_cookie(LOGIN_COOKIE)
        self._cookie(response, SESSION_COOKIE, self.codec.dump(session), int(self.codec.max_age))
        log.info("signed in", extra={"login": me.login})
        return response

    async def _exchange(self, code: str) -> str | None:
        async with httpx.AsyncClient(transport=self.transport, timeout=30.0) as client:
            answer = await client.post(
                f"{self.settings.github_web_url}/login/oauth/access_token",
                data={
                    "client_id": self.settings.github_client_id,
                    "client_secret": self.settings.github_client_secret,
                    "code": code,
                    "redirect_uri": self.callback_url,
                },
                headers={"accept": "application/json"},
            )
        if answer.status_code != 200:
            log.warning("code exchange answered %s", answer.status_code)
            return None
        body = answer.json()
        token = body.get("access_token") if isinstance(body, dict) else None
        if not token:
            log.warning("code exchange refused: %s", body.get("error") if body else body)
            return None
        return str(token)

    async def _revoke_at_github(self, token: str) -> None:
        """Revoke the user token at GitHub, so it is worthless even to someone
        who got it out of a cookie. Best effort: the sign-in has already ended
        server side, and a GitHub that does not answer must not keep anyone
        signed in."""
        try:
            async with httpx.AsyncClient(transport=self.transport, timeout=10.0) as client:
                answer = await client.request(
                    "DELETE",
                    f"{self.settings.github_api_url}/applications/"
                    f"{self.settings.github_client_id}/token",
                    auth=(self.settings.github_client_id, self.settings.github_client_secret),
                    json={"access_token": token},
                    headers={"accept": "application/vnd.github+json"},
                )
        except httpx.HTTPError as exc:
            log.warning("could not revoke the user token at GitHub: %s", exc)
            return
        if answer.status_code not in (204, 404):  # 404: already revoked or expired
            log.warning("revoking the user token at GitHub answered %s", answer.status_code)

    async def logout(self, request: Request) -> Response:
        principal = await self.guard.principal(request)
        form = await request.form()
        submitted = form.get("csrf")
        if principal is not None and not self.guard.csrf_ok(
            request, principal, submitted if isinstance(submitted, str) else None
        ):
            return Response("missing or wrong CSRF token", status_code=403)
        if principal is not None and principal.session is not None:
            session = principal.session
            await asyncio.to_thread(
                sign_out,
                self.guard.store,
                session.sid,
                expires_at=session.issued_at + self.codec.max_age,
            )
            self.access.forget(session.github_token)
            await self._revoke_at_github(session.github_token)
            log.info("signed out", extra={"login": session.login})
        response = RedirectResponse("/signed-out", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    def endpoints(self) -> dict[str, Endpoint]:
        return {"login": self.login, "callback": self.callback, "logout": self.logout}
