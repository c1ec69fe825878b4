"""Who is asking, and which repositories they may read or act on.

Two kinds of principal: a person signed in with GitHub (their session), and an
operator API token (automation, metrics scrapers). A person's access is what
GitHub says with their own user token: the repositories of the App's
installations they can reach (``GET /user/installations`` and
``GET /user/installations/{id}/repositories``, whose entries carry the user's
``permissions``). The answer is cached for a short while per token, so a page
load costs no GitHub call and a revoked permission stops counting soon.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import Literal

import httpx
from githubkit import GitHub, TokenAuthStrategy

from app.web.session import Session

Level = Literal["read", "write"]


@dataclass(frozen=True)
class Principal:
    kind: Literal["user", "token"]
    #: GitHub login, or ``token:<name>`` for an API token.
    name: str
    #: For tokens: their scopes. People hold ``read`` and ``act``, bounded per repository.
    scopes: frozenset[str]
    session: Session | None = None
    #: People only: repository full name (lower case) -> read | write.
    repositories: dict[str, Level] | None = None

    @property
    def actor(self) -> str:
        """How the principal is named in history when it acts."""
        return f"@{self.name}" if self.kind == "user" else self.name

    def visible(self) -> set[str] | None:
        """Repositories whose runs this principal may read; None means all."""
        if self.kind == "token":
            return None if "read" in self.scopes else set()
        return set(self.repositories or {})

    def may_read(self, repo: str | None) -> bool:
        if self.kind == "token":
            return "read" in self.scopes
        return repo is not None and repo.lower() in (self.repositories or {})

    def may_act(self, repo: str | None) -> bool:
        if self.kind == "token":
            return "act" in self.scopes
        return repo is not None and (self.repositories or {}).get(repo.lower()) == "write"


def level_of(permissions: object) -> Level | None:
    """GitHub's per-repository ``permissions`` flags -> what the dashboard allows."""
    if permissions is None:
        return None
    flags = {
        name
        for name in ("admin", "maintain", "push", "triage", "pull")
        if getattr(permissions, name, False)
    }
    if flags & {"admin", "maintain", "push"}:
        return "write"
    if flags:
        return "read"
    return None


class RepoAccess:
    """The repositories a user token reaches, cached ``ttl`` seconds per token."""

    def __init__(
        self, api_url: str, *, ttl: float, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.api_url = api_url
        self.ttl = ttl
        self.transport = transport
        self._cache: dict[str, tuple[float, dict[str, Level]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def client(self, token: str) -> GitHub[TokenAuthStrategy]:
        return GitHub(
            TokenAuthStrategy(token),
            base_url=self.api_url,
            auto_retry=False,
            http_cache=False,
            async_transport=self.transport,
        )

    async def repositories(self, token: str) -> dict[str, Level]:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        # One lookup per token at a time: a page and its live stream arriving
        # together ask GitHub once.
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._cache.get(key)
            if cached is not None and cached[0] > time.monotonic():
                return cached[1]
            found = await self._ask_github(token)
            now = time.monotonic()
            # Drop what has expired, so signed-out users do not accumulate.
            for stale in [k for k, (until, _) in self._cache.items() if until <= now]:
                self._cache.pop(stale, None)
                self._locks.pop(stale, None)
            self._cache[key] = (now + self.ttl, found)
            return found

    async def _ask_github(self, token: str) -> dict[str, Level]:
        found: dict[str, Level] = {}
        async with self.client(token) as gh:
            installations = gh.rest.paginate(
                gh.rest.apps.async_list_installations_for_authenticated_user,
                map_func=lambda r: r.parsed_data.installations,
            )
            async for inst in installations:
                repos = gh.rest.paginate(
                    gh.rest.apps.async_list_installation_repos_for_authenticated_user,
                    map_func=lambda r: r.parsed_data.repositories,
                    installation_id=inst.id,
                )
                async for repo in repos:
                    level = level_of(repo.permissions)
                    if level is not None:
                        found[repo.full_name.lower()] = level
        return found

    def forget(self, token: str) -> None:
        self._cache.pop(hashlib.sha256(token.encode()).hexdigest(), None)
