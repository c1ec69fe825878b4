"""GitHub App authentication: the App JWT and cached installation tokens.

The App JWT (RS256, signed with the App's private key) comes from githubkit's
:class:`~githubkit.AppAuthStrategy`. Installation tokens are minted with it
and cached here rather than by githubkit's ``AppInstallationAuthStrategy``,
because that strategy (0.16.1) keeps tokens in a process-wide default cache
with a fixed one-minute margin, mints twice when two requests race on an empty
cache, and never refreshes on a 401. This module makes each of those explicit:

- a token is reused until ``refresh_margin`` before it expires (default five
  minutes, enough for a git push that starts just before the margin);
- one mint at a time per installation (concurrent callers wait and share it);
- a request answered 401 invalidates the token it used, mints once, and is
  sent once more; a second 401 reaches the caller (see ``errors.classify``);
- tokens are cached per :class:`TokenScope`: an installation, optionally
  narrowed to one repository and the permissions a step needs (a fetch gets
  ``contents: read`` on its repository, nothing else), so a token handed to
  git can do no more than that step.

The private key never appears in a repr, a log line or an exception message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from githubkit import AppAuthStrategy
from githubkit.auth.app import AppAuth
from githubkit.auth.base import BaseAuthStrategy

if TYPE_CHECKING:
    from githubkit import GitHubCore

DEFAULT_REFRESH_MARGIN = timedelta(minutes=5)

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class CredentialsError(ValueError):
    """The App id or private key is missing or unusable (the message never holds the key)."""


@dataclass(frozen=True)
class AppCredentials:
    app_id: str
    private_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.app_id:
            raise CredentialsError("GitHub App id is not set (GITHUB_APP_ID)")
        if not self.private_key:
            raise CredentialsError("GitHub App private key is not set (GITHUB_PRIVATE_KEY)")
        # Fail at start-up, not at the first request, and without echoing the key.
        try:
            key = load_pem_private_key(self.private_key.encode(), password=None)
        except (ValueError, TypeError):
            raise CredentialsError("GitHub App private key is not a PEM private key") from None
        if not isinstance(key, RSAPrivateKey):
            raise CredentialsError("GitHub App private key must be an RSA key (JWTs use RS256)")


#: A JWT is valid for ten minutes (GitHub's maximum); it is signed again after eight.
JWT_LIFETIME = timedelta(minutes=10)
JWT_REUSE = timedelta(minutes=8)
#: Issued this far in the past, against clock drift (as GitHub advises).
JWT_BACKDATE = timedelta(minutes=1)


class AppJWT:
    """The App's JWT: the private key parsed once, the token signed once and
    reused for :data:`JWT_REUSE`.

    githubkit parses the PEM key for every JWT it signs, and signs one for
    every token mint that finds its cache empty, which all the runs starting
    together do at once (an ``await`` sits between its cache read and write).
    Here nothing awaits between the check and the reuse, so one event loop
    signs one JWT per period.
    """

    def __init__(self, issuer: str, private_key: str, *, clock: Clock = utcnow) -> None:
        self.issuer = issuer
        self._key = load_pem_private_key(private_key.encode(), password=None)
        self._clock = clock
        self._token = ""
        self._renew_at = datetime.min.replace(tzinfo=UTC)
        #: JWTs signed so far (tests read it).
        self.signed = 0

    def current(self) -> str:
        now = self._clock()
        if now >= self._renew_at:
            issued = now - JWT_BACKDATE
            claims = {"iss": self.issuer, "iat": issued, "exp": issued + JWT_LIFETIME}
            self._token = jwt.encode(claims, self._key, algorithm="RS256")  # type: ignore[arg-type]
            self._renew_at = now + JWT_REUSE
            self.signed += 1
        return self._token

    def __repr__(self) -> str:
        return f"AppJWT(issuer={self.issuer!r})"


class _QuietAppAuth(AppAuth):
    jwts: AppJWT

    def __repr__(self) -> str:
        return f"AppAuth(app_id={self.app_id!r}, private_key=<hidden>)"

    def get_jwt(self) -> str:
        return self.jwts.current()

    async def aget_jwt(self) -> str:
        return self.jwts.current()


class AppJWTAuthStrategy(AppAuthStrategy):
    """githubkit's App strategy with the private key kept out of reprs and
    one :class:`AppJWT` shared by every request of this strategy."""

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[no-untyped-call]
        self.jwts = AppJWT(str(self.app_id), self.private_key)

    def __repr__(self) -> str:
        return f"AppJWTAuthStrategy(app_id={self.app_id!r}, private_key=<hidden>)"

    def get_auth_flow(self, github: GitHubCore[AppJWTAuthStrategy]) -> httpx.Auth:
        auth = _QuietAppAuth(github, self.app_id, self.private_key)
        auth.jwts = self.jwts
        return auth


@dataclass(frozen=True)
class InstallationToken:
    token: str = field(repr=False)
    expires_at: datetime
    #: GitHub's numeric ids of the repositories a narrowed token covers, as
    #: the mint answered (names get reused; ids do not): what a worker's git
    #: object cache is keyed by (app/github/objcache.py).
    repository_ids: tuple[int, ...] = ()

    def fresh(self, now: datetime, margin: timedelta) -> bool:
        return now + margin < self.expires_at


@dataclass(frozen=True)
class TokenScope:
    """What a token may do: one installation, narrowed to repositories and permissions.

    Empty ``repositories`` / ``permissions`` mean the installation's own.
    """

    installation_id: int
    #: Repository names (without the owner), as GitHub's ``repositories`` field takes.
    repositories: tuple[str, ...] = ()
    #: ``(permission, level)`` pairs, sorted, e.g. ``(("contents", "read"),)``.
    permissions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls,
        installation_id: int,
        *,
        repository: str | None = None,
        permissions: Mapping[str, str] | None = None,
    ) -> TokenScope:
        """``repository`` may be ``owner/name`` or ``name``."""
        names = (repository.rsplit("/", 1)[-1],) if repository else ()
        return cls(installation_id, names, tuple(sorted((permissions or {}).items())))

    def body(self) -> dict[str, object]:
        """The request body for ``POST /app/installations/{id}/access_tokens``."""
        body: dict[str, object] = {}
        if self.repositories:
            body["repositories"] = list(self.repositories)
        if self.permissions:
            body["permissions"] = dict(self.permissions)
        return body


Mint = Callable[[TokenScope], Awaitable[InstallationToken]]


def _scope(key: int | TokenScope) -> TokenScope:
    return key if isinstance(key, TokenScope) else TokenScope(key)


class InstallationTokenCache:
    """Installation tokens per :class:`TokenScope`, minted on demand (single-flight).

    An ``int`` key means the whole installation (what REST clients use).
    """

    def __init__(
        self,
        mint: Mint,
        *,
        refresh_margin: timedelta = DEFAULT_REFRESH_MARGIN,
        clock: Clock = utcnow,
    ) -> None:
        self._mint = mint
        self.refresh_margin = refresh_margin
        self._clock = clock
        self._tokens: dict[TokenScope, InstallationToken] = {}
        self._locks: dict[TokenScope, asyncio.Lock] = {}
        #: Tokens minted so far (tests and metrics read it).
        self.mints = 0

    async def get(self, key: int | TokenScope) -> InstallationToken:
        scope = _scope(key)
        cached = self._tokens.get(scope)
        if cached is not None and cached.fresh(self._clock(), self.refresh_margin):
            return cached
        lock = self._locks.setdefault(scope, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(scope)  # minted while we waited?
            if cached is not None and cached.fresh(self._clock(), self.refresh_margin):
                return cached
            token = await self._mint(scope)
            self.mints += 1
            self._tokens[scope] = token
            return token

    def invalidate(self, key: int | TokenScope, token: InstallationToken) -> None:
        """Forget ``token`` if it is still the cached one (a newer token stays)."""
        scope = _scope(key)
        if self._tokens.get(scope) is token:
            del self._tokens[scope]


class _InstallationAuth(httpx.Auth):
    # The body must be replayable for the one retry after a 401.
    requires_request_body = True

    def __init__(self, cache: InstallationTokenCache, scope: int | TokenScope) -> None:
        self._cache = cache
        self._installation_id = scope

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        raise RuntimeError("repairbot's installation clients are async only")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._cache.get(self._installation_id)
        request.headers["Authorization"] = f"token {token.token}"
        response = yield request
        if response.status_code != 401:
            return
        # Revoked or expired early: a 401 means GitHub did not act on the request,
        # so sending it again with a fresh token cannot double an effect.
        self._cache.invalidate(self._installation_id, token)
        token = await self._cache.get(self._installation_id)
        request.headers["Authorization"] = f"token {token.token}"
        yield request

    def __repr__(self) -> str:
        return f"InstallationAuth(installation_id={self._installation_id})"


@dataclass(frozen=True)
class InstallationAuthStrategy(BaseAuthStrategy):
    """Authenticate as one installation, with tokens from a shared cache."""

    cache: InstallationTokenCache = field(repr=False)
    #: An installation id (the whole installation), or a narrower scope.
    installation_id: int | TokenScope

    def get_auth_flow(self, github: GitHubCore[InstallationAuthStrategy]) -> httpx.Auth:
        return _InstallationAuth(self.cache, self.installation_id)


def parse_expiry(expires_at: str) -> datetime:
    """GitHub's ``expires_at`` (``2016-07-11T22:14:10Z``) as an aware datetime."""
    return datetime.fromisoformat(expires_at.replace("Z", "+00:00")).astimezone(UTC)
