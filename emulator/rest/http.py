"""The plumbing every REST endpoint shares: auth, faults, errors, pagination.

An endpoint is a plain function ``(Ctx) -> Reply`` run in a worker thread under
the store lock (git calls block; the lock makes each request atomic). The
:class:`Endpoint` ASGI wrapper around it applies injected faults first, so a
``fail`` never touches state and a ``drop`` always has.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx
from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from emulator.auth import AuthError, Principal, authenticate, can_see, may
from emulator.faults import Fault
from emulator.render.base import Urls
from emulator.state import Repo, User
from emulator.versions import UnsupportedVersion, adapt, select

if TYPE_CHECKING:
    from emulator.app import Emulator

DOCS = "https://docs.github.com/rest"
AuthMode = Literal["jwt", "token", "any"]


class ApiError(Exception):
    """A GitHub error answer: ``{"message", "documentation_url", "status"}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, Any]] | list[str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message, "documentation_url": DOCS}
        if self.errors is not None:
            out["errors"] = self.errors
        out["status"] = str(self.status)
        return out


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def validation(message: str = "Validation Failed", **error: Any) -> ApiError:
    return ApiError(422, message, errors=[error] if error else [])


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Ctx:
    emu: Emulator
    principal: Principal
    params: dict[str, str]
    query: QueryParams
    raw_body: bytes
    urls: Urls

    def json(self) -> dict[str, Any]:
        if not self.raw_body.strip():
            return {}
        try:
            data = json.loads(self.raw_body)
        except ValueError:
            raise ApiError(400, "Problems parsing JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, "Problems parsing JSON")
        return data

    def repo(
        self, *, permission: str = "metadata", level: str = "read", role: str = "read"
    ) -> Repo:
        """The path's repository, if the caller may act on it this way.

        Invisible repositories are 404 (GitHub does not confirm they exist);
        visible but not writable ones are 403.
        """
        repo = self.emu.store.repo(self.params["owner"], self.params["repo"])
        if repo is None or not can_see(self.emu.store, self.principal, repo):
            raise not_found()
        if self.emu.store.arriving(repo):
            raise not_found()  # a fork GitHub is still creating
        if self.principal.kind == "anonymous" and level != "read":
            raise ApiError(401, "Requires authentication")
        if not may(self.principal, repo, permission=permission, level=level, role=role):
            if self.principal.kind == "installation":
                raise ApiError(403, "Resource not accessible by integration")
            if self.principal.kind == "user":
                raise ApiError(403, f"Must have {role} access to repository")
            raise not_found()
        return repo

    def actor(self) -> User:
        """The user an action is attributed to: the human, or the app's bot account."""
        if self.principal.user is not None:
            return self.principal.user
        if self.principal.app is not None:
            return self.emu.bot_user(self.principal.app)
        raise ApiError(401, "Requires authentication")

    def int_param(self, name: str) -> int:
        try:
            return int(self.params[name])
        except ValueError:
            raise not_found() from None


Handler = Callable[[Ctx], Reply]


@dataclass(frozen=True)
class Spec:
    """One endpoint: ``template`` is GitHub's route, also the fault key's path."""

    method: str
    template: str
    handler: Handler
    auth: AuthMode = "token"

    @property
    def key(self) -> str:
        return f"{self.method} {self.template}"


def paginate(
    ctx: Ctx, items: list[Any], *, wrap: Callable[[list[Any]], Any] | None = None
) -> Reply:
    """``per_page``/``page`` slicing with a GitHub-style ``Link`` header."""
    try:
        per_page = max(1, min(100, int(ctx.query.get("per_page", "30"))))
        page = max(1, int(ctx.query.get("page", "1")))
    except ValueError:
        raise validation() from None
    chunk = items[(page - 1) * per_page : page * per_page]
    last = max(1, -(-len(items) // per_page))
    links = []
    path = ctx.emu.base_path + ctx.params.get("__path__", "")
    base = f"{ctx.urls.web}{path}?per_page={per_page}&page="
    if page < last:
        links += [f'<{base}{page + 1}>; rel="next"', f'<{base}{last}>; rel="last"']
    if page > 1:
        links += [f'<{base}1>; rel="first"', f'<{base}{page - 1}>; rel="prev"']
    headers = {"link": ", ".join(links)} if links else {}
    return Reply(200, wrap(chunk) if wrap else chunk, headers)


class DroppedResponse(httpx.RemoteProtocolError):
    """Raised after a ``drop`` fault sent the response head: the body never comes.

    Under uvicorn the server then closes the connection, and the client's httpx
    raises its own ``RemoteProtocolError``. Under ``httpx.ASGITransport`` this
    exception itself reaches the client, the same type either way.
    """


class Endpoint:
    """ASGI app for one route: faults, then auth and the handler in a thread."""

    def __init__(self, emu: Emulator, spec: Spec) -> None:
        self.emu = emu
        self.spec = spec

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            version = select(request.headers.get("x-github-api-version"))
        except UnsupportedVersion as exc:
            await _send_json(send, 400, ApiError(400, exc.message).body(), {}, version=None)
            return
        fault = self.emu.faults.take(self.spec.key)
        if fault is not None and fault.kind == "delay":
            await anyio.sleep(fault.delay)
        elif fault is not None and fault.kind in ("fail", "rate_limit"):
            status, body, headers = fault_answer(fault, self.emu.store.now().timestamp())
            await _send_json(send, status, body, headers, version=version)
            return
        try:
            raw = await request.body()
        except ClientDisconnect:
            # The client gave up before sending its whole body (its timeout, a
            # killed worker): GitHub never saw the request, so neither do we.
            return
        params = {k: str(v) for k, v in request.path_params.items()}
        params["__path__"] = request.url.path[len(self.emu.base_path) :]
        urls = self.emu.urls_for(request)
        auth_header = request.headers.get("authorization")
        status, body, headers = await anyio.to_thread.run_sync(
            self._run, auth_header, params, request.query_params, raw, urls
        )
        if fault is not None and fault.kind == "drop":
            # Applied, then the answer is held (if ``delay``) and never comes.
            await anyio.sleep(fault.delay)
            await send({"type": "http.response.start", "status": status, "headers": []})
            raise DroppedResponse("emulator dropped the connection after applying the request")
        if status < 300:
            body = adapt(body, version, self.spec.key)
        await _send_json(send, status, body, headers, version=version)

    def _run(
        self,
        auth_header: str | None,
        params: dict[str, str],
        query: QueryParams,
        raw: bytes,
        urls: Urls,
    ) -> tuple[int, Any, dict[str, str]]:
        store = self.emu.store
        with store.lock:
            try:
                principal = authenticate(store, auth_header)
                self._check_auth_mode(principal)
                headers = self.emu.rate.count(principal)
                ctx = Ctx(self.emu, principal, params, query, raw, urls)
                reply = self.spec.handler(ctx)
                return reply.status, reply.body, {**headers, **reply.headers}
            except AuthError as exc:
                return exc.status, ApiError(exc.status, exc.message).body(), {}
            except ApiError as exc:
                return exc.status, exc.body(), exc.headers

    def _check_auth_mode(self, principal: Principal) -> None:
        mode = self.spec.auth
        if mode == "jwt" and principal.kind != "app":
            raise ApiError(
                401,
                "A JSON web token could not be decoded"
                if principal.kind != "anonymous"
                else "Requires authentication",
            )
        if mode == "token" and principal.kind == "app":
            raise ApiError(
                403,
                "Resource not accessible by integration (use an installation token)",
            )


def fault_answer(fault: Fault, now: float) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The answer GitHub gives for a failure or a rate limit of this kind."""
    if fault.kind == "fail":
        message = fault.message or "Injected failure"
        return fault.status, ApiError(fault.status, message).body(), {}
    status = fault.status if fault.status in (403, 429) else 403
    if fault.rate_limit_style == "retry-after":
        message = (
            "You have exceeded a secondary rate limit."
            " Please wait a few minutes before you try again."
        )
        return status, ApiError(status, message).body(), {"retry-after": str(fault.retry_after)}
    reset = int(now) + fault.retry_after
    headers = {
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-used": "5000",
        "x-ratelimit-reset": str(reset),
        "x-ratelimit-resource": "core",
    }
    return status, ApiError(status, "API rate limit exceeded for installation.").body(), headers


async def _send_json(
    send: Send, status: int, body: Any, headers: dict[str, str], *, version: str | None
) -> None:
    payload = b"" if status == 204 or body is None else json.dumps(body).encode()
    head = [
        (b"content-type", b"application/json; charset=utf-8"),
        (b"x-github-request-id", uuid.uuid4().hex[:16].upper().encode()),
    ]
    if version is not None:
        head.append((b"x-github-api-version-selected", version.encode()))
    if status != 204:
        head.append((b"content-length", str(len(payload)).encode()))
    head += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})
