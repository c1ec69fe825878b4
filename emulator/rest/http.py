"""The plumbing every REST endpoint shares: auth, faults, errors, pagination.

An endpoint is a plain function ``(Ctx) -> Reply`` run in a worker thread under
the store lock (git calls block; the lock makes each request atomic). The
:class:`Endpoint` ASGI wrapper around it applies injected faults first, so a
``fail`` never touches state and a ``drop`` always has.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode

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


def validation(
    summary: str = "Validation Failed",
    *,
    resource: str | None = None,
    field: str | None = None,
    code: str | None = None,
    message: str | None = None,
) -> ApiError:
    """GitHub's 422. With a ``resource``: ``{"message": "Validation Failed",
    "errors": [{"resource", "field", "code"}]}``, where a ``custom`` error
    carries its own ``message``. Without one: GitHub's plain form, the
    problem as the top-level ``message`` (``summary``) and no ``errors``."""
    if resource is None:
        assert not (field or code or message), "a validation error names its resource"
        return ApiError(422, summary)
    error: dict[str, Any] = {"resource": resource}
    if field is not None:
        error["field"] = field
    error["code"] = code or "invalid"
    if message is not None:
        error["message"] = message
    assert error["code"] != "custom" or message, "a custom validation error says what is wrong"
    return ApiError(422, summary, errors=[error])


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
        owner, name = self.params["owner"], self.params["repo"]
        repo = self.emu.store.repo(owner, name)
        if repo is None:
            self._redirect_if_moved(owner, name)
        if repo is None or not can_see(self.emu.store, self.principal, repo):
            raise not_found()
        self._redirect_if_transferred(repo)
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

    def _redirect_if_transferred(self, repo: Repo) -> None:
        """An issue transferred away answers with a redirect to its new place."""
        raw = self.params.get("issue_number")
        moved = repo.transferred_issues.get(int(raw)) if raw and raw.isdigit() else None
        if moved is None:
            return
        target_id, number = moved
        target = next((r for r in self.emu.store.repos.values() if r.id == target_id), None)
        if target is None or not can_see(self.emu.store, self.principal, target):
            return
        path = self.params.get("__path__", "")
        old = f"/repos/{self.params['owner']}/{self.params['repo']}/issues/{raw}"
        if path.lower().startswith(old.lower()):
            path = f"/repos/{target.full_name}/issues/{number}" + path[len(old) :]
        self._redirect(path)

    def _redirect(self, path: str) -> None:
        query = f"?{self.query}" if str(self.query) else ""
        location = f"{self.urls.api}{path}{query}"
        status = 301 if self.params.get("__method__", "GET") in ("GET", "HEAD") else 307
        raise ApiError(status, "Moved Permanently", headers={"Location": location})

    def _redirect_if_moved(self, owner: str, name: str) -> None:
        """A renamed or transferred repository's old name answers as GitHub's
        does: 301 for reads, 307 (keep the method and body) for the rest,
        with the new location (GitHub's points at ``/repositories/{id}``;
        here at the new name, which serves the same resource)."""
        from emulator.moves import moved_repo

        repo = moved_repo(self.emu, owner, name)
        if repo is None or not can_see(self.emu.store, self.principal, repo):
            return
        path = self.params.get("__path__", "")
        old = f"/repos/{owner}/{name}"
        if path.lower().startswith(old.lower()):
            path = f"/repos/{repo.full_name}" + path[len(old) :]
        self._redirect(path)

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
    """``per_page``/``page`` slicing with a GitHub-style ``Link`` header whose
    URLs keep every other query parameter (filters such as ``state`` or
    ``head``), as GitHub's do. Like GitHub, a ``per_page`` or ``page`` that is
    not a number is taken as its default."""
    per_page = max(1, min(100, _number(ctx.query.get("per_page"), 30)))
    page = max(1, _number(ctx.query.get("page"), 1))
    chunk = items[(page - 1) * per_page : page * per_page]
    last = max(1, -(-len(items) // per_page))
    path = ctx.emu.base_path + ctx.params.get("__path__", "")
    kept = [(k, v) for k, v in ctx.query.multi_items() if k not in ("per_page", "page")]

    def link(to: int, rel: str) -> str:
        query = urlencode([*kept, ("per_page", str(per_page)), ("page", str(to))])
        return f'<{ctx.urls.web}{path}?{query}>; rel="{rel}"'

    links = []
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    headers = {"link": ", ".join(links)} if links else {}
    return Reply(200, wrap(chunk) if wrap else chunk, headers)


def _number(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


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
        params["__method__"] = request.method
        urls = self.emu.urls_for(request)
        auth_header = request.headers.get("authorization")
        answer = (auth_header, params, request.query_params, raw, urls)
        if self.emu.threaded:
            status, body, headers, principal = await anyio.to_thread.run_sync(self._run, *answer)
        else:
            status, body, headers, principal = self._run(*answer)
        if fault is not None and fault.kind == "drop":
            # Applied, then the answer is held (if ``delay``) and never comes.
            await anyio.sleep(fault.delay)
            await send({"type": "http.response.start", "status": status, "headers": []})
            raise DroppedResponse("emulator dropped the connection after applying the request")
        if status < 300:
            body = adapt(body, version, self.spec.key)
        if self.spec.method == "GET" and status == 200 and principal is not None:
            tag = etag(body, principal.label, version)
            headers = {**headers, "etag": tag}
            if tag in if_none_match(request.headers.get("if-none-match")):
                # Not Modified: no body, and (as on GitHub, for an authorized
                # request) not counted against the primary rate limit.
                with self.emu.store.lock:
                    headers.update(self.emu.rate.refund(principal))
                await _send_not_modified(send, headers, version=version)
                return
        await _send_json(send, status, body, headers, version=version)

    def _run(
        self,
        auth_header: str | None,
        params: dict[str, str],
        query: QueryParams,
        raw: bytes,
        urls: Urls,
    ) -> tuple[int, Any, dict[str, str], Principal | None]:
        """The answer, and who asked (``None`` when authentication failed)."""
        store = self.emu.store
        principal: Principal | None = None
        with store.lock:
            # GitHub counts, and reports the count on, every answer but a
            # refused credential (which it counts against the caller's address).
            rate: dict[str, str] = {}
            try:
                principal = authenticate(store, auth_header)
                rate = self.emu.rate.count(principal)
                self._check_auth_mode(principal)
                ctx = Ctx(self.emu, principal, params, query, raw, urls)
                reply = self.spec.handler(ctx)
                headers = {**rate, **reply.headers}
                if reply.status == 201 and isinstance(reply.body, dict) and reply.body.get("url"):
                    # GitHub's 201 names the created resource's API URL.
                    headers.setdefault("location", str(reply.body["url"]))
                return reply.status, reply.body, headers, principal
            except AuthError as exc:
                anonymous = self.emu.rate.headers(Principal("anonymous"))
                return exc.status, ApiError(exc.status, exc.message).body(), anonymous, None
            except ApiError as exc:
                return exc.status, exc.body(), {**rate, **exc.headers}, principal

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


def etag(body: Any, principal: str, version: str | None) -> str:
    """A weak validator of the answer, as GitHub's: it depends on the body and
    on who asks (``Vary: Authorization``: one installation's or user's tag never
    validates another's copy), not on which of their tokens asked, so a copy
    stays valid across installation-token renewals."""
    digest = hashlib.sha256()
    digest.update(json.dumps(body, sort_keys=True).encode())
    digest.update(b"\0" + principal.encode() + b"\0" + (version or "").encode())
    return f'W/"{digest.hexdigest()[:40]}"'


def if_none_match(header: str | None) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (weak comparison: ``W/``
    is ignored on both sides, as RFC 9110 asks for GET)."""
    if not header:
        return set()
    tags = {tag.strip() for tag in header.split(",") if tag.strip()}
    return {tag if tag.startswith("W/") else f"W/{tag}" for tag in tags}


async def _send_not_modified(send: Send, headers: dict[str, str], *, version: str | None) -> None:
    head = [(b"x-github-request-id", uuid.uuid4().hex[:16].upper().encode())]
    if version is not None:
        head.append((b"x-github-api-version-selected", version.encode()))
    head += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": 304, "headers": head})
    await send({"type": "http.response.body", "body": b""})


def not_found_body() -> dict[str, Any]:
    """What GitHub answers for a path or method it has no route for."""
    return ApiError(404, "Not Found").body()


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
