"""The GitHub client factory: built once per worker, hands out authenticated clients.

One factory holds the App credentials, one installation-token cache and one
githubkit client per installation, so every job on the worker shares tokens
instead of minting its own. githubkit's automatic retries are off: retrying
is the runtime's job (it knows budgets, and a rate limit that asks for an
hour must not hold a worker), and a blind retry of a 5xx mutation would skip
the reconcile step that keeps effects single.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, TypeVar, cast

import httpx
from githubkit import GitHub
from githubkit.auth.base import BaseAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.config import Config, get_config
from githubkit.utils import UNSET
from sqlalchemy import Engine

from app.config import Settings
from app.github.auth import (
    DEFAULT_REFRESH_MARGIN,
    AppCredentials,
    AppJWTAuthStrategy,
    Clock,
    CredentialsError,
    InstallationAuthStrategy,
    InstallationToken,
    InstallationTokenCache,
    TokenScope,
    parse_expiry,
    utcnow,
)
from app.github.conditional import (
    ConditionalStore,
    ConditionalTransport,
    DatabaseConditionalStore,
    MemoryConditionalStore,
)
from app.github.errors import classified
from app.github.rate_budget import RateBudget
from app.github.transport import SharedTransport

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)

A = TypeVar("A", bound=BaseAuthStrategy)


class PooledGitHub(GitHub[A]):
    """githubkit's client, sending every request through one long-lived httpx client.

    Outside ``async with``, githubkit builds an ``httpx.AsyncClient`` around
    each request (auth flow, headers, the environment's proxy settings) and
    closes it afterwards: about a seventh of a worker's CPU per repair run
    went there (docs/benchmarks.md, CPU per repair run). The connection pool
    underneath was already shared (app/github/transport.py), so keeping the
    client changes nothing on the wire. It keeps no cookies, as the one-shot
    clients kept none between requests.
    """

    _pooled: httpx.AsyncClient | None = None

    @asynccontextmanager
    async def get_async_client(self) -> AsyncGenerator[httpx.AsyncClient, None]:
        if self._pooled is None:
            client = await self._create_async_client()
            # Set directly: the ``cookies`` setter wraps what it is given in a
            # plain httpx.Cookies. The jar under it refuses every domain too,
            # should anything add a cookie by another way than an answer.
            client._cookies = _NoCookies(CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])))
            self._pooled = client
        yield self._pooled

    async def aclose_pooled(self) -> None:
        """Close the kept httpx client (the shared pool under it stays open)."""
        client, self._pooled = self._pooled, None
        if client is not None:
            await client.aclose()


class _NoCookies(httpx.Cookies):
    """A client's cookies when none are ever kept: an answer's ``Set-Cookie``
    is not even parsed. httpx hands every answer to ``extract_cookies``,
    which wraps it in urllib's request and message types for the jar: 33 µs
    an answer, about 2% of a request's CPU (docs/benchmarks.md, CPU per
    GitHub request), for a jar that refuses every cookie anyway."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


InstallationGitHub = PooledGitHub[InstallationAuthStrategy]
AppGitHub = PooledGitHub[AppJWTAuthStrategy]


class GitHubClientFactory:
    """Authenticated githubkit clients for the App and its installations.

    Keyword arguments:

    - ``base_url``: REST base URL (``Settings.github_api_url``; the emulator's in tests).
    - ``credentials``: App id and private key.
    - ``refresh_margin``: an installation token is replaced this long before it expires.
    - ``timeout``: per-request timeouts.
    - ``transport``: an httpx transport to use instead of the network (tests).
    - ``user_agent``: sent with every request; GitHub asks for one naming the app.
    - ``clock``: for token expiry decisions (tests).
    - ``conditional``: where installation clients keep answers to revalidate
      GETs with ``If-None-Match`` (:mod:`app.github.conditional`); ``None``: off.
    - ``budget``: the installation rate budget shared by every worker
      (:mod:`app.github.rate_budget`); ``None``: off.
    """

    def __init__(
        self,
        *,
        base_url: str,
        credentials: AppCredentials,
        refresh_margin: timedelta = DEFAULT_REFRESH_MARGIN,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent: str = "repairbot",
        clock: Clock = utcnow,
        conditional: ConditionalStore | None = None,
        budget: RateBudget | None = None,
    ) -> None:
        self.base_url = base_url
        self.transport = SharedTransport(transport or httpx.AsyncHTTPTransport())
        self.conditional = conditional
        self.budget = budget
        self._config = get_config(
            base_url=base_url,
            timeout=timeout,
            user_agent=user_agent,
            # One pool for every client of this factory, which githubkit's
            # per-request clients must not close (app/github/transport.py).
            async_transport=self.transport,
            auto_retry=False,
            # Reconciliation must read what GitHub holds now, not a cached copy.
            http_cache=False,
            # Our own JWT cache: githubkit's default cache is shared by every
            # client in the process, so two factories (two emulators in one test
            # run, or two Apps) would otherwise read each other's entries.
            cache_strategy=MemCacheStrategy(),
        )
        self._app: AppGitHub = PooledGitHub(
            AppJWTAuthStrategy(credentials.app_id, credentials.private_key), config=self._config
        )
        self.tokens = InstallationTokenCache(self._mint, refresh_margin=refresh_margin, clock=clock)
        self._installations: dict[TokenScope, InstallationGitHub] = {}
        self._bot_login: str | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        engine: Engine | None = None,
    ) -> GitHubClientFactory:
        """``engine``: the database every worker shares; with it, GETs are
        revalidated against stored answers and the rate budget is shared."""
        credentials = AppCredentials(settings.github_app_id, settings.github_private_key)
        return cls(
            base_url=settings.github_api_url,
            credentials=credentials,
            transport=transport,
            conditional=DatabaseConditionalStore(engine) if engine is not None else None,
            budget=RateBudget(engine) if engine is not None else None,
        )

    def __repr__(self) -> str:
        return f"GitHubClientFactory(base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the kept clients and the connection pool they share."""
        clients: list[PooledGitHub[Any]] = [self._app, *self._installations.values()]
        for client in clients:
            await client.aclose_pooled()
        await self.transport.close()

    def app(self) -> AppGitHub:
        """A client authenticated as the App itself (JWT): ``/app/...`` endpoints."""
        return self._app

    def for_installation(
        self, installation_id: int, *, repository: str | None = None
    ) -> InstallationGitHub:
        """A client acting as one installation; tokens come from the shared cache.

        ``repository`` (``owner/name``): its tokens are minted for that one
        repository, so a run's calls cannot reach the installation's others.
        """
        scope = TokenScope.of(installation_id, repository=repository)
        client = self._installations.get(scope)
        if client is None:
            key: int | TokenScope = scope if repository else installation_id
            client = PooledGitHub(
                InstallationAuthStrategy(self.tokens, key),
                config=self._installation_config(installation_id),
            )
            self._installations[scope] = client
        return client

    def _installation_config(self, installation_id: int) -> Config:
        """The shared config, with GETs revalidated and the rate budget kept
        when those are on (the App's own JWT client never uses them)."""
        if self.conditional is None and self.budget is None:
            return self._config
        transport = ConditionalTransport(
            self.transport,
            installation_id,
            self.conditional or MemoryConditionalStore(max_entries=0),
            self.budget,
        )
        return replace(self._config, async_transport=transport)

    async def bot_login(self) -> str:
        """``<app-slug>[bot]``, the account our comments and pull requests are written by.

        Searches for our markers filter on it: anyone can paste a marker into
        their own comment. Read once from ``GET /app`` and kept.
        """
        if self._bot_login is None:
            with classified(mutation=False):
                response = await self._app.rest.apps.async_get_authenticated()
            app = response.parsed_data
            if app is None or not app.slug:
                raise CredentialsError("GET /app did not name the App (no slug)")
            self._bot_login = f"{app.slug}[bot]"
        return self._bot_login

    async def installation_suspended(self, installation_id: int) -> bool:
        """Whether the owner suspended the installation (asked with the App's
        JWT, which a suspension does not refuse). Git answers a suspended
        installation's token with a bare 401/403; this tells that apart."""
        with classified(mutation=False):
            response = await self._app.rest.apps.async_get_installation(installation_id)
        return response.parsed_data.suspended_at is not None

    async def installation_token(
        self,
        installation_id: int,
        *,
        repository: str | None = None,
        permissions: Mapping[str, str] | None = None,
    ) -> InstallationToken:
        """A token with at least ``refresh_margin`` to live, for git over HTTPS.

        ``repository`` (``owner/name``) and ``permissions`` narrow it to what the
        step needs: GitHub then refuses it anything else (404 on another
        repository, 403 for a write it was not given).
        """
        scope = TokenScope.of(installation_id, repository=repository, permissions=permissions)
        return await self.tokens.get(scope)

    async def _mint(self, scope: TokenScope) -> InstallationToken:
        # Minting is idempotent in effect (a new token each time, nothing to undo),
        # so it counts as a read for classification.
        with classified(mutation=False):
            body = scope.body()
            response = await self._app.rest.apps.async_create_installation_access_token(
                scope.installation_id, data=cast(Any, body) if body else UNSET
            )
        data = response.parsed_data
        covered = data.repositories if isinstance(data.repositories, list) else []
        return InstallationToken(
            token=data.token,
            expires_at=parse_expiry(data.expires_at),
            repository_ids=tuple(repo.id for repo in covered),
        )
