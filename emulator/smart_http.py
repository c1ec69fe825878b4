"""Git smart HTTP for the emulator: ``git http-backend`` behind an ASGI app.

URLs are GitHub's: ``/{owner}/{repo}.git/info/refs?service=...``,
``/{owner}/{repo}.git/git-upload-pack`` and ``/{owner}/{repo}.git/git-receive-pack``
(the ``.git`` suffix is optional), relative to wherever the app is mounted.

Git itself does the protocol work: every request runs ``git http-backend`` as
a CGI subprocess, so ``git push --atomic --force-with-lease`` is enforced by
the real ``receive-pack``, exactly as on GitHub. This module only adds what
GitHub adds around it: authentication, the repository mapping, injected
faults, and a callback with the refs a push actually moved.

Pushes to one repository are serialised by a per-repository lock held from the
"before" snapshot of its refs to the callback, so each callback names only the
moves of its own push. The moves are the push commands (parsed from the
request) whose ref ended at the commanded value.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from emulator.faults import Fault, FaultRegistry
from emulator.git import ZERO_SHA, BareRepo, RefUpdate, git_environment

__all__ = [
    "Authorizer",
    "ConnectionDropped",
    "GitAuthError",
    "GitSmartHTTP",
    "RefUpdate",
    "RefsUpdatedHook",
    "RepoResolver",
    "parse_receive_commands",
]

logger = logging.getLogger(__name__)

Service = Literal["git-upload-pack", "git-receive-pack"]

#: ``(owner, repo) -> bare repository path``, or None for "no such repository".
#: May be a coroutine function; a plain function runs in a worker thread.
RepoResolver = Callable[[str, str], Path | Awaitable[Path | None] | None]
#: ``(owner, repo, username, password, write) -> principal``; raises GitAuthError.
#: May be a coroutine function; a plain function runs in a worker thread.
Authorizer = Callable[[str, str, str | None, str | None, bool], object]
#: ``(owner, repo, principal, updates)``, after a push moved at least one ref.
RefsUpdatedHook = Callable[[str, str, object, list[RefUpdate]], Awaitable[None] | None]

#: Server-side git configuration, GitHub's behaviour where it matters to clients.
_SERVER_CONFIG = {
    "http.receivepack": "true",
    "http.uploadpack": "true",
    # GitHub serves any reachable commit by sha, and partial clones.
    "uploadpack.allowReachableSHA1InWant": "true",
    "uploadpack.allowFilter": "true",
    # GitHub checks pushed objects.
    "receive.fsckObjects": "true",
    # No background gc racing with tests that delete the repository.
    "receive.autogc": "false",
    "gc.auto": "0",
}

_ROUTE = re.compile(
    r"^/(?P<owner>[A-Za-z0-9._-]+)/(?P<repo>[A-Za-z0-9._-]+?)(?:\.git)?"
    r"/(?P<action>info/refs|git-upload-pack|git-receive-pack)$"
)
_SERVICES: tuple[Service, ...] = ("git-upload-pack", "git-receive-pack")
_GIT_PROTOCOL = re.compile(r"^[A-Za-z0-9=:._-]{1,200}$")
#: What git sends as the body of a probe request before a large POST.
_PROBE = b"0000"
_UNAUTHORIZED = (
    "Invalid username or token. Password authentication is not supported for Git operations."
)


class GitAuthError(Exception):
    """Raised by an authorizer: 401 (missing or bad credentials), 403 (not allowed),
    or 404 (the caller may not know the repository exists)."""

    def __init__(self, status: int, message: str | None = None) -> None:
        super().__init__(message or f"git authorization failed ({status})")
        self.status = status
        self.message = message


class ConnectionDropped(Exception):
    """Raised on purpose by a ``drop`` fault after the response head was sent: the
    server then cuts the connection, so the client never sees the real answer."""


class _RequestError(Exception):
    """Answer the request with this status and a text message instead."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class _GitRequest:
    """One authorised smart-HTTP request."""

    owner: str
    repo: str
    repo_path: Path
    service: Service
    #: "advertise" for GET info/refs, "rpc" for the POSTs.
    action: Literal["advertise", "rpc"]
    username: str | None
    principal: object
    content_type: str
    git_protocol: str | None
    remote_addr: str


@dataclass(frozen=True)
class _CgiAnswer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class GitSmartHTTP:
    """ASGI app serving git smart HTTP for the repositories ``resolve_repo`` knows.

    Keyword arguments:

    - ``resolve_repo(owner, repo)``: path of the bare repository, or None (404).
      Like all callbacks here it may be a coroutine function; a plain function runs
      in a worker thread, so it may block on locks or run git.
    - ``authorize(owner, repo, username, password, write)``: the principal, or raise
      GitAuthError. Git sends ``x-access-token`` / the token as Basic credentials;
      ``Bearer``/``token`` headers arrive as username ``x-access-token``.
    - ``on_refs_updated(owner, repo, principal, updates)``: awaited (or run in a
      thread when it is a plain function) after a push moved refs, before git gets
      its answer. Its failures are logged, never turned into a failed push.
    - ``faults``: injected faults, keys ``"git push"`` (receive-pack POSTs) and
      ``"git fetch"`` (upload-pack POSTs, including protocol v2 ``ls-refs``).
    - ``max_body_bytes``: largest request body accepted (after gzip), else 413.
    - ``timeout``: seconds one ``git http-backend`` run may take before it is killed.
    """

    def __init__(
        self,
        *,
        resolve_repo: RepoResolver,
        authorize: Authorizer,
        on_refs_updated: RefsUpdatedHook | None = None,
        faults: FaultRegistry | None = None,
        max_body_bytes: int = 256 * 1024 * 1024,
        timeout: float = 300.0,
        resolve_moved: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self._resolve_repo = resolve_repo
        #: The new ``owner/name`` of a renamed or transferred repository.
        self._resolve_moved = resolve_moved
        self._authorize = authorize
        self._on_refs_updated = on_refs_updated
        self._faults = faults
        self._max_body_bytes = max_body_bytes
        self._timeout = timeout
        self._push_locks: dict[Path, asyncio.Lock] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            call = await self._authorised_call(scope)
            if call.action == "advertise":
                await self._stream(send, call, b"")
                return
            body = await _read_body(receive, scope, self._max_body_bytes)
            if call.service == "git-receive-pack":
                await self._push(send, call, body)
            else:
                await self._fetch(send, call, body)
        except _RequestError as exc:
            headers = {**_error_headers(exc.status), **exc.headers}
            await _send_text(send, exc.status, exc.message, headers)

    # ------------------------------------------------------------------ routing and auth

    async def _authorised_call(self, scope: Scope) -> _GitRequest:
        match = _ROUTE.match(_route_path(scope))
        if match is None or match["owner"] in (".", "..") or match["repo"] in (".", ".."):
            raise _RequestError(404, "Not Found")
        owner, repo, action = match["owner"], match["repo"], match["action"]
        service = _service_of(scope, action)
        headers = _header_map(scope)
        username, password = _credentials(headers.get("authorization"))
        found = await _invoke(self._resolve_repo, owner, repo)
        repo_path = Path(found) if isinstance(found, str | Path) else None
        moved = (
            self._resolve_moved(owner, repo) if repo_path is None and self._resolve_moved else None
        )
        if moved is not None:
            # As GitHub: the old URL redirects (git follows it for the first request).
            path = _route_path(scope)
            tail = path[path.index(f"/{action}") :]
            root = str(scope.get("root_path", ""))
            query = scope.get("query_string", b"").decode("latin-1")
            location = f"{root}/{moved}.git{tail}" + (f"?{query}" if query else "")
            raise _RequestError(301, "Moved Permanently", {"Location": location})
        if repo_path is None:
            # GitHub asks anonymous callers to authenticate before admitting anything.
            if username is None:
                raise _RequestError(401, _UNAUTHORIZED)
            raise _RequestError(404, "Repository not found.")
        write = service == "git-receive-pack"
        try:
            principal = await _invoke(self._authorize, owner, repo, username, password, write)
        except GitAuthError as exc:
            raise _RequestError(exc.status, _auth_message(exc, owner, repo, username)) from None
        protocol = headers.get("git-protocol")
        client = scope.get("client")
        return _GitRequest(
            owner=owner,
            repo=repo,
            repo_path=repo_path,
            service=service,
            action="advertise" if action == "info/refs" else "rpc",
            username=username,
            principal=principal,
            content_type=headers.get("content-type", ""),
            git_protocol=protocol if protocol and _GIT_PROTOCOL.match(protocol) else None,
            remote_addr=str(client[0]) if client else "127.0.0.1",
        )

    # ------------------------------------------------------------------ the three requests

    async def _fetch(self, send: Send, call: _GitRequest, body: bytes) -> None:
        fault = await self._apply_fault("git fetch", body)
        if fault is not None and fault.kind == "drop":
            answer = await self._run(call, body)
            await _drop(send, answer)
            return
        await self._stream(send, call, body)

    async def _push(self, send: Send, call: _GitRequest, body: bytes) -> None:
        fault = await self._apply_fault("git push", body)
        commands = parse_receive_commands(body)
        repo = BareRepo(call.repo_path)
        async with self._push_lock(call.repo_path):
            before = await asyncio.to_thread(repo.list_refs) if commands else {}
            answer = await self._run(call, body)
            after = await asyncio.to_thread(repo.list_refs) if commands else {}
            updates = _moved_refs(commands, before, after)
            if updates:
                await self._notify(call, updates)
        if fault is not None and fault.kind == "drop":
            await _drop(send, answer)
            return
        await _send_answer(send, answer)

    async def _notify(self, call: _GitRequest, updates: list[RefUpdate]) -> None:
        if self._on_refs_updated is None:
            return
        try:
            await _invoke(self._on_refs_updated, call.owner, call.repo, call.principal, updates)
        except Exception:
            # The refs moved whatever the callback thinks; failing the push would lie.
            logger.exception("on_refs_updated failed for %s/%s", call.owner, call.repo)

    def _push_lock(self, repo_path: Path) -> asyncio.Lock:
        return self._push_locks.setdefault(repo_path.resolve(), asyncio.Lock())

    # ------------------------------------------------------------------ faults

    async def _apply_fault(self, endpoint: str, body: bytes) -> Fault | None:
        """Take this request's fault, if any: fail and rate_limit raise the answer
        (nothing is applied), delay sleeps, drop is returned for the caller to apply
        once the request has been performed."""
        # A probe only checks that the server is there; it must not use up a fault.
        if self._faults is None or body == _PROBE:
            return None
        fault = self._faults.take(endpoint)
        if fault is None:
            return None
        if fault.kind == "delay":
            await asyncio.sleep(fault.delay)
        elif fault.kind in ("fail", "rate_limit"):
            status, message, headers = _fault_answer(fault, time.time())
            raise _RequestError(status, message, headers)
        return fault

    # ------------------------------------------------------------------ running git http-backend

    async def _stream(self, send: Send, call: _GitRequest, body: bytes) -> None:
        """Run the backend and pass its answer on as it comes (fetches can be large)."""
        async with asyncio.timeout(self._timeout), _backend(call, body) as backend:
            status, headers = await backend.head()
            await send({"type": "http.response.start", "status": status, "headers": headers})
            while chunk := await backend.read(64 * 1024):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _run(self, call: _GitRequest, body: bytes) -> _CgiAnswer:
        """Run the backend to completion and keep its whole answer."""
        async with asyncio.timeout(self._timeout), _backend(call, body) as backend:
            status, headers = await backend.head()
            return _CgiAnswer(status, headers, await backend.read())


# --------------------------------------------------------------------------- the CGI process


class _Backend:
    """One ``git http-backend`` process: request body in, CGI answer out."""

    def __init__(self, process: asyncio.subprocess.Process, body: bytes) -> None:
        self._process = process
        self._feeder = asyncio.create_task(self._feed(body))
        assert process.stderr is not None
        self._stderr = asyncio.create_task(process.stderr.read())

    @property
    def _stdout(self) -> asyncio.StreamReader:
        assert self._process.stdout is not None
        return self._process.stdout

    async def _feed(self, body: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(body)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the backend answered without reading everything; its answer says why
        finally:
            stdin.close()

    async def head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The CGI status and headers (``Status:`` becomes the HTTP status)."""
        status, headers = 200, []
        while line := (await self._stdout.readline()).rstrip(b"\r\n"):
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"status":
                status = int(value.split()[0])
            else:
                headers.append((name, value))
        if self._stdout.at_eof() and not headers:
            raise _RequestError(500, "git http-backend failed")
        return status, headers

    async def read(self, size: int = -1) -> bytes:
        return await self._stdout.read(size)

    async def close(self) -> None:
        """Reap the process; kill it if the answer was not read to the end."""
        if self._process.returncode is None and not self._stdout.at_eof():
            self._process.kill()
        returncode = await self._process.wait()
        self._feeder.cancel()
        stderr = await self._stderr
        with contextlib.suppress(asyncio.CancelledError):
            await self._feeder
        if returncode != 0 or stderr:
            level = logging.WARNING if returncode != 0 else logging.DEBUG
            logger.log(
                level, "git http-backend exited %s: %s", returncode, stderr.decode(errors="replace")
            )


@contextlib.asynccontextmanager
async def _backend(call: _GitRequest, body: bytes) -> AsyncIterator[_Backend]:
    process = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_cgi_environment(call, body),
        cwd=call.repo_path,
    )
    backend = _Backend(process, body)
    try:
        yield backend
    finally:
        await backend.close()


def _cgi_environment(call: _GitRequest, body: bytes) -> dict[str, str]:
    suffix = "info/refs" if call.action == "advertise" else call.service
    config = {"GIT_CONFIG_COUNT": str(len(_SERVER_CONFIG))}
    for i, (key, value) in enumerate(_SERVER_CONFIG.items()):
        config[f"GIT_CONFIG_KEY_{i}"] = key
        config[f"GIT_CONFIG_VALUE_{i}"] = value
    cgi = {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_METHOD": "GET" if call.action == "advertise" else "POST",
        "GIT_PROJECT_ROOT": str(call.repo_path.parent),
        "PATH_INFO": f"/{call.repo_path.name}/{suffix}",
        "QUERY_STRING": f"service={call.service}" if call.action == "advertise" else "",
        "GIT_HTTP_EXPORT_ALL": "1",
        # http-backend makes the reflog identity from these.
        "REMOTE_USER": call.username or "anonymous",
        "REMOTE_ADDR": call.remote_addr,
    }
    if call.action == "rpc":
        cgi["CONTENT_TYPE"] = call.content_type
        cgi["CONTENT_LENGTH"] = str(len(body))
    if call.git_protocol:
        cgi["HTTP_GIT_PROTOCOL"] = call.git_protocol
    return git_environment({**config, **cgi})


# --------------------------------------------------------------------------- pushes


def parse_receive_commands(body: bytes) -> list[tuple[str, str, str]]:
    """The ``(old_sha, new_sha, ref)`` commands at the start of a receive-pack request."""
    commands = []
    pos = 0
    while pos + 4 <= len(body):
        try:
            size = int(body[pos : pos + 4], 16)
        except ValueError:
            break
        if size < 4:  # flush (0000) ends the command list
            break
        payload = body[pos + 4 : pos + size]
        pos += size
        line = payload.split(b"\x00", 1)[0].rstrip(b"\n").decode("utf-8", errors="replace")
        parts = line.split(" ")
        if len(parts) == 3 and not line.startswith("shallow "):
            commands.append((parts[0], parts[1], parts[2]))
    return commands


def _moved_refs(
    commands: list[tuple[str, str, str]], before: dict[str, str], after: dict[str, str]
) -> list[RefUpdate]:
    """The commands receive-pack applied: the ref now holds the commanded value and
    did not before. receive-pack checked the commanded old value under its ref lock,
    so that is the true old value (a delete may send zeros: then use the snapshot)."""
    updates = []
    for old, new, ref in commands:
        prior, now = before.get(ref, ZERO_SHA), after.get(ref, ZERO_SHA)
        if now == new and prior != new:
            updates.append(RefUpdate(ref, old if old != ZERO_SHA else prior, new))
    return updates


# --------------------------------------------------------------------------- HTTP helpers


async def _invoke(function: Callable[..., object], *args: object) -> object:
    """Call a callback that may be async; plain functions run in a worker thread,
    since they may take locks or run git."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an async __call__, not callability
    ):
        result = function(*args)
    else:
        result = await asyncio.to_thread(function, *args)
    if inspect.isawaitable(result):
        return await result
    return result


def is_git_path(scope: Scope) -> bool:
    """The request is for git (``/<owner>/<repo>[.git]/info/refs`` and the two services)."""
    return _ROUTE.match(_route_path(scope)) is not None


def _route_path(scope: Scope) -> str:
    """The path below the mount point (Starlette keeps the full path in ``path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


def _service_of(scope: Scope, action: str) -> Service:
    method = scope["method"]
    if action != "info/refs":
        if method != "POST":
            raise _RequestError(405, "Method Not Allowed")
        return "git-upload-pack" if action == "git-upload-pack" else "git-receive-pack"
    if method != "GET":
        raise _RequestError(405, "Method Not Allowed")
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    service = query.get("service", [""])[0]
    for known in _SERVICES:
        if service == known:
            return known
    # The dumb protocol, which GitHub dropped long ago.
    raise _RequestError(403, "Please upgrade your git client.")


def _header_map(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _credentials(header: str | None) -> tuple[str | None, str | None]:
    """(username, password) from an Authorization header; (None, None) if absent or garbled."""
    if not header:
        return None, None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() in ("bearer", "token"):
        return "x-access-token", value.strip()
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    username, sep, password = decoded.partition(":")
    return username, password if sep else None


def _auth_message(exc: GitAuthError, owner: str, repo: str, username: str | None) -> str:
    if exc.message:
        return exc.message
    if exc.status == 401:
        return _UNAUTHORIZED
    if exc.status == 403:
        return f"Permission to {owner}/{repo}.git denied to {username or 'anonymous'}."
    return "Repository not found."


async def _read_body(receive: Receive, scope: Scope, limit: int) -> bytes:
    """The whole request body, gunzipped if git compressed it."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _RequestError(400, "client disconnected")
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _RequestError(413, "Request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    encoding = _header_map(scope).get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return _gunzip(body, limit)
    if encoding not in ("", "identity"):
        raise _RequestError(415, f"Unsupported Content-Encoding: {encoding}")
    return body


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise _RequestError(400, "Bad gzip request body") from None
    if len(body) > limit:
        raise _RequestError(413, "Request body too large")
    return body


def _fault_answer(fault: Fault, now: float) -> tuple[int, str, dict[str, str]]:
    """GitHub's answer to a failure or rate limit of this kind (as the REST side gives it)."""
    if fault.kind == "fail":
        return fault.status, "Injected failure", {}
    status = fault.status if fault.status in (403, 429) else 403
    if fault.rate_limit_style == "retry-after":
        message = (
            "You have exceeded a secondary rate limit."
            " Please wait a few minutes before you try again."
        )
        return status, message, {"retry-after": str(fault.retry_after)}
    headers = {
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-used": "5000",
        "x-ratelimit-reset": str(int(now) + fault.retry_after),
        "x-ratelimit-resource": "core",
    }
    return status, "API rate limit exceeded for installation.", headers


def _error_headers(status: int) -> dict[str, str]:
    return {"www-authenticate": 'Basic realm="GitHub"'} if status == 401 else {}


async def _send_text(send: Send, status: int, message: str, headers: dict[str, str]) -> None:
    body = f"{message}\n".encode()
    head = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    head += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_answer(send: Send, answer: _CgiAnswer) -> None:
    headers = [(k, v) for k, v in answer.headers if k != b"content-length"]
    headers.append((b"content-length", str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": False})


async def _drop(send: Send, answer: _CgiAnswer) -> None:
    """Send the real response head, then cut the connection before any of the body."""
    headers = [(k, v) for k, v in answer.headers if k != b"content-length"]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    raise ConnectionDropped("fault injection: request applied, response dropped")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
