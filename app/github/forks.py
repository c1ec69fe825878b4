"""Proposal forks: where unreviewed agent code lives until a writer approves it.

GitHub runs a repository's workflows for branches of that repository with its
secrets and a writable token; for pull requests from a fork it runs
``pull_request`` workflows without secrets and with a read-only token. So
repairbot pushes its proposals to a fork owned by an account the operator
chooses (``REPAIRBOT_PROPOSAL_OWNER``, where the App is installed on all
repositories) and opens the draft pull request on the base repository from
``<owner>:<branch>``.

The fork is made on first use (``POST /repos/{o}/{r}/forks``: 202, and the
fork exists a little later) and found again by name and parent: a repository
of that name in the proposal account that is a fork of the base repository's
id is ours, whoever made it (an operator may create it by hand). Asking
GitHub to fork again answers the existing fork, so a lost answer or a
crash between the request and its record is safe to repeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from githubkit.exception import GitHubException
from githubkit_schemas.v2026_03_10.models import FullRepository, Repository

from app.engine import PermanentError, TransientError
from app.github.auth import Clock, utcnow
from app.github.client import GitHubClientFactory, InstallationGitHub
from app.github.errors import classified, classify, no_answer, status_of
from app.github.repos import RepoRef

#: Reads of a new fork before the activity gives up for now (the runtime
#: retries it later, with backoff, holding no worker).
DEFAULT_POLLS = 5
#: Seconds before the first read again; doubled each time.
FIRST_PAUSE = 0.5

Ready = Callable[[RepoRef], Awaitable[bool]]
Pause = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class Account:
    """The proposal account's installation of the App."""

    login: str
    installation_id: int
    organization: bool


class ForkRefused(PermanentError):
    """GitHub will not make or give the fork: a human must act (message says how)."""


async def proposal_account(factory: GitHubClientFactory, owner: str) -> Account:
    """The App's installation on ``owner`` (an organization, or a user)."""
    app = factory.app()
    for organization in (True, False):
        try:
            if organization:
                found = await app.rest.apps.async_get_org_installation(owner)
            else:
                found = await app.rest.apps.async_get_user_installation(owner)
        except GitHubException as exc:
            if status_of(exc) == 404:
                continue
            raise classify(exc, mutation=False) from exc
        return Account(owner, found.parsed_data.id, organization)
    raise ForkRefused(
        f"the GitHub App is not installed on {owner} (REPAIRBOT_PROPOSAL_OWNER): "
        f"install it there on all repositories"
    )


#: How long a worker reuses the proposal account's installation it read.
ACCOUNT_REUSE = timedelta(minutes=1)


class ProposalAccounts:
    """:func:`proposal_account`, read from GitHub at most once per
    :data:`ACCOUNT_REUSE` per worker and owner.

    A run asked for it at each step that touches its fork (choosing the
    fork, pushing, the drift check, deleting the branch: four App requests
    a run), and every run of the worker asks about the same account. What is
    kept is an installation id, not a credential, and only in this worker's
    memory. Whatever fails while a caller works with the account
    (:meth:`using`) drops it, so a retry after the App was reinstalled (a
    new installation id) reads GitHub again instead of waiting out the reuse.
    """

    def __init__(
        self,
        factory: GitHubClientFactory,
        *,
        reuse: timedelta = ACCOUNT_REUSE,
        clock: Clock = utcnow,
    ) -> None:
        self._factory = factory
        self._reuse = reuse
        self._clock = clock
        self._accounts: dict[str, tuple[Account, datetime]] = {}

    async def get(self, owner: str) -> Account:
        kept = self._accounts.get(owner)
        if kept is not None and self._clock() < kept[1]:
            return kept[0]
        account = await proposal_account(self._factory, owner)
        self._accounts[owner] = (account, self._clock() + self._reuse)
        return account

    @asynccontextmanager
    async def using(self, owner: str) -> AsyncIterator[Account]:
        """The account, forgotten if the block fails (a token refused, say)."""
        account = await self.get(owner)
        try:
            yield account
        except BaseException:
            self._accounts.pop(owner, None)
            raise


async def _fork_of(gh: InstallationGitHub, repo: RepoRef, base_id: int) -> bool | None:
    """Whether ``repo`` is a fork of the base (None: no such repository, yet)."""
    try:
        response = await gh.rest.repos.async_get(repo.owner, repo.name)
    except GitHubException as exc:
        if status_of(exc) == 404:
            return None
        raise classify(exc, mutation=False) from exc
    return _names_parent(response.parsed_data, base_id)


def _names_parent(data: FullRepository, base_id: int) -> bool:
    """A fork whose parent is the repository with id ``base_id``."""
    parent = data.parent
    return bool(data.fork and isinstance(parent, Repository) and parent.id == base_id)


async def base_id(gh: InstallationGitHub, base: RepoRef) -> int:
    with classified(mutation=False):
        return (await gh.rest.repos.async_get(base.owner, base.name)).parsed_data.id


async def ensure_fork(
    factory: GitHubClientFactory,
    base_gh: InstallationGitHub,
    base: RepoRef,
    account: Account,
    *,
    ready: Ready,
    parent_id: int | None = None,
    polls: int = DEFAULT_POLLS,
    pause: Pause = asyncio.sleep,
) -> RepoRef:
    """The proposal account's fork of ``base``, made if there is none, once it
    can be pushed to (``ready``: git answers for it).

    ``parent_id``: the base repository's id as the run knows it (from the
    signed event that started it, which runs are keyed by); ``None``: read
    from GitHub by name. Only a fork whose parent has this id is ours.
    """
    if parent_id is None:
        parent_id = await base_id(base_gh, base)
    gh = factory.for_installation(account.installation_id)
    named = RepoRef(account.login, base.name)
    if await _fork_of(gh, named, parent_id) and await ready(named):
        return named
    fork = await _request_fork(gh, base, account, parent_id) or named
    wait = FIRST_PAUSE
    for _ in range(polls):
        found = await _fork_of(gh, fork, parent_id)
        if found is False:
            raise ForkRefused(f"{fork} exists and is not a fork of {base}: rename or remove it")
        if found and await ready(fork):
            return fork
        await pause(wait)
        wait *= 2
    raise TransientError(f"the fork {fork} of {base} is not ready yet")


async def _request_fork(
    gh: InstallationGitHub, base: RepoRef, account: Account, parent_id: int
) -> RepoRef | None:
    """Ask GitHub for the fork; the fork it names (None: the answer was lost)."""
    options: dict[str, Any] = {"name": base.name, "default_branch_only": True}
    if account.organization:
        options["organization"] = account.login
    try:
        response = await gh.rest.repos.async_create_fork(base.owner, base.name, **options)
    except GitHubException as exc:
        if no_answer(exc):
            return None  # asking again is safe: GitHub answers the existing fork
        if status_of(exc) in (403, 404):
            raise ForkRefused(
                f"GitHub refused to fork {base} into {account.login} ({status_of(exc)}): the "
                f"App needs Administration (write) on {account.login} and {base} must allow "
                f"forking; or create the fork {account.login}/{base.name} yourself"
            ) from exc
        raise classify(exc, mutation=True) from exc
    data = response.parsed_data
    if not _names_parent(data, parent_id):
        raise ForkRefused(f"GitHub answered {data.full_name}, which is not a fork of {base}")
    return RepoRef.parse(data.full_name)
