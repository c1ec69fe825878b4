"""Who is asking, and which repositories they may read or act on.

Two kinds of principal: a person signed in with GitHub (their session), and an
operator API token (automation, metrics scrapers). A person's access is what
GitHub says with their own user token: the repositories of the App's
installations they can reach (``GET /user/installations`` and
``GET /user/installations/{id}/repositories``, whose entries carry the user's
``permissions``). The answer is cached for a short while per token, so a page
load costs no GitHub call and a revoked permission stops counting soon.

Runs are authorized by repository id (GitHub's, recorded in the run's input
when it started), not by name: names move with renames and transfers, and a
new repository can take a freed name. Only runs recorded without an id (older
builds) fall back to the name.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import Literal

import httpx
from githubkit import GitHub, TokenAuthStrategy

from app.engine import RunRow
from app.operations.runs_view import Visible, repo_id_of, repo_of
from app.web.session import Session

Level = Literal["read", "write"]


@dataclass(frozen=True)
class Reach:
    """What GitHub says a user reaches: repository id and lower-case name -> level."""

    by_id: dict[int, Level]
    by_name: dict[str, Level]


@dataclass(frozen=True)
class Principal:
    kind: Literal["user", "token"]
    #: GitHub login, or ``token:<name>`` for an API token.
    name: str
    #: For tokens: their scopes. People hold ``read`` and ``act``, bounded per repository.
    scopes: frozenset[str]
    session: Session | None = None
    #: People only: the repositories they reach, by id and by name.
    reach: Reach | None = None

    @property
    def actor(self) -> str:
        """How the principal is named in history when it acts."""
        return f"@{self.name}" if self.kind == "user" else self.name

    def visible(self) -> Visible | None:
        """Repositories whose runs this principal may read; None means all."""
        if self.kind == "token":
            return None if "read" in self.scopes else Visible()
        reach = self.reach or Reach({}, {})
        return Visible(ids=frozenset(reach.by_id), names=frozenset(reach.by_name))

    def level(self, repo: str | None, repo_id: int | None = None) -> Level | None:
        """This person's level on a repository: by its id when it is known (the
        name is then ignored), else by its name."""
        reach = self.reach or Reach({}, {})
        if repo_id is not None:
            return reach.by_id.get(repo_id)
        return reach.by_name.get(repo.lower()) if repo is not None else None

    def can_view_repository(self, repo_id: int | None, repo: str | None = None) -> bool:
        if self.kind == "token":
            return "read" in self.scopes
        return self.level(repo, repo_id) is not None

    def may_read(self, repo: str | None) -> bool:
        """By name: for records that carry no repository id (deliveries)."""
        return self.can_view_repository(None, repo)

    def may_act(self, repo: str | None, repo_id: int | None = None) -> bool:
        if self.kind == "token":
            return "act" in self.scopes
        return self.level(repo, repo_id) == "write"

    def may_read_run(self, run: RunRow) -> bool:
        return self.can_view_repository(repo_id_of(run), repo_of(run))

    def may_act_on_run(self, run: RunRow) -> bool:
        return self.may_act(repo_of(run), repo_id_of(run))


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
        self._cache: dict[str, tuple[float, Reach]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def client(self, token: str) -> GitHub[TokenAuthStrategy]:
        return GitHub(
            TokenAuthStrategy(token),
            base_url=self.api_url,
            auto_retry=False,
            http_cache=False,
            async_transport=self.transport,
        )

    async def repositories(self, token: str) -> Reach:
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

    async def _ask_github(self, token: str) -> Reach:
        found = Reach({}, {})
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
                        found.by_id[repo.id] = level
                        found.by_name[repo.full_name.lower()] = level
        return found

    def forget(self, token: str) -> None:
        self._cache.pop(hashlib.sha256(token.encode()).hexdigest(), None)
