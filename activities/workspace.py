"""Workspace activities, and how every activity gets a workspace.

A :class:`WorkspaceSpec` is the recorded input a workspace is rebuilt from:
repository, base commit, candidate patch (by evidence reference). Each
activity that needs a checkout opens a fresh one with :func:`open_workspace`
and removes it before it returns; the next attempt, on any worker, rebuilds
it from the same spec.

``prepare_workspace`` checks the base can be built and reads the
repository's ``.github/repairbot.yml`` and the issue's repro block at that
commit, so the workflow fixes its commands once, from the base it repairs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from activities._support import (
    keep_alive,
    read_evidence,
)
from app.checkout import UnsafePath, read_in_checkout
from app.config import Settings
from app.contracts import workspace
from app.contracts.workspace import PrepareInput, PrepareResult, WorkspaceSpec
from app.engine import (
    ActivityContext,
    PermanentError,
    TransientError,
    implements,
)
from app.evidence import EvidenceRef, EvidenceStore
from app.github.auth import InstallationToken
from app.github.errors import SUSPENDED, InstallationSuspended
from app.github.objcache import FetchAccess, ObjectCache, ObjectFetchError
from app.repo_config import (
    CONFIG_PATH,
    MAX_CONFIG_BYTES,
    RepoConfig,
    RepoConfigError,
    parse_repo_config,
    reproduction_commands,
    reproduction_from_issue,
)
from app.sandbox.runner import Sandbox
from app.workspace import (
    FETCH_TIME_LIMIT,
    CheckoutRefused,
    CommitNotFound,
    FetchFailed,
    PatchRejected,
    Workspace,
    build_workspace,
    raise_unless_fetched,
    remove_workspace,
)

log = logging.getLogger("repairbot.activities")
T = TypeVar("T")


class GitCredentials:
    """How a worker authenticates git fetches (a shared client, in :class:`Checkouts`).

    This base sends no credentials: right for public and local (``file://``)
    repositories, and what a worker without any registered uses. Nothing it
    fetches is cached: no GitHub repository id vouches for whose it is.
    """

    async def token(self, spec: WorkspaceSpec) -> str | None:
        """A token for reading ``spec.repo`` (sent to ``spec.clone_url`` only)."""
        return (await self.access(spec)).token

    async def access(self, spec: WorkspaceSpec) -> FetchAccess:
        """The token for reading ``spec.repo`` and the cache key of its objects."""
        return FetchAccess(None)

    def git_config(self, spec: WorkspaceSpec) -> Sequence[tuple[str, str]]:
        """Extra git settings for fetching ``spec.clone_url`` (a proxy, a protocol)."""
        return ()

    async def suspended(self, spec: WorkspaceSpec) -> bool:
        """Whether a failed fetch was the installation's suspension (git
        answers it with a bare 401/403)."""
        return False


#: Reading the code is all a fetch needs.
FETCH_PERMISSIONS = {"contents": "read"}


class InstallationGit(GitCredentials):
    """An installation token for the one repository, read-only, from
    ``token_for(installation_id, repo, permissions)``."""

    def __init__(
        self,
        token_for: Callable[[int, str, Mapping[str, str]], Awaitable[InstallationToken]],
        is_suspended: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        self._token_for = token_for
        self._is_suspended = is_suspended

    async def access(self, spec: WorkspaceSpec) -> FetchAccess:
        if spec.installation_id is None:
            return FetchAccess(None)
        token = await self._token_for(spec.installation_id, spec.repo, FETCH_PERMISSIONS)
        return FetchAccess.minted(spec.installation_id, token)

    async def suspended(self, spec: WorkspaceSpec) -> bool:
        if spec.installation_id is None or self._is_suspended is None:
            return False
        return await self._is_suspended(spec.installation_id)


class PatchRejectedError(PermanentError):
    """The recorded candidate patch does not apply to the recorded base."""


def read_patch(store: EvidenceStore, ref: EvidenceRef | None) -> str | None:
    # surrogateescape: a patch of a non-UTF-8 file must reach git byte for byte.
    return None if ref is None else read_evidence(store, ref).decode(errors="surrogateescape")


@dataclass(frozen=True)
class Checkouts:
    """What the activities that work in a checkout (workspace, repository
    commands, agent) are given: where workspaces and environments live
    (settings), the evidence store, the sandbox commands run in, and how git
    authenticates."""

    settings: Settings
    evidence: EvidenceStore
    sandbox: Sandbox = field(default_factory=Sandbox)
    credentials: GitCredentials = field(default_factory=GitCredentials)
    #: The worker process's git object cache (``None``: every workspace fetches).
    objects: ObjectCache | None = None

    async def keep_alive(self, actx: ActivityContext, work: Awaitable[T], *, doing: str) -> T:
        """``work`` awaited with heartbeats at the sandbox's interval."""
        return await keep_alive(actx, work, doing=doing, every=self.sandbox.heartbeat_interval)


@contextlib.asynccontextmanager
async def open_workspace(
    actx: ActivityContext, checkouts: Checkouts, spec: WorkspaceSpec
) -> AsyncIterator[Workspace]:
    """A fresh workspace for ``spec``, removed when the block ends.

    Build failures carry their retryability: an unreachable remote is
    transient; a missing commit or a patch that does not apply never heals.
    """
    patch = read_patch(checkouts.evidence, spec.patch)
    credentials = checkouts.credentials
    access = await credentials.access(spec)
    depth = spec.checkout.depth if spec.checkout else 1
    tags = spec.checkout.tags if spec.checkout else False
    # The lease on the cache entry the workspace borrows from ends after it.
    async with contextlib.AsyncExitStack() as objects:
        try:
            ws = await checkouts.keep_alive(
                actx,
                _build(checkouts, spec, patch, access, objects, depth=depth, tags=tags),
                doing=f"fetching {spec.repo}@{spec.base_sha[:12]}",
            )
        except FetchFailed as exc:
            if await credentials.suspended(spec):
                raise InstallationSuspended(f"{exc} ({SUSPENDED})") from None
            raise TransientError(str(exc)) from None
        except (CommitNotFound, CheckoutRefused) as exc:
            raise PermanentError(str(exc)) from None
        except PatchRejected as exc:
            raise PatchRejectedError(f"the candidate patch does not apply: {exc}") from None
        log.info("workspace %s for %s (run %s)", ws.root.name, spec.repo, actx.run_id)
        try:
            yield ws
        finally:
            # In a thread: a big checkout takes a while to delete.
            await asyncio.to_thread(remove_workspace, ws)


async def _build(
    checkouts: Checkouts,
    spec: WorkspaceSpec,
    patch: str | None,
    access: FetchAccess,
    objects: contextlib.AsyncExitStack,
    *,
    depth: int,
    tags: bool,
) -> Workspace:
    """The workspace, borrowing the base from the worker's cache where it may
    (the commit alone: more history or tags are fetched into the workspace)."""
    credentials = checkouts.credentials
    entry = None
    if checkouts.objects is not None and access.key is not None and depth == 1 and not tags:
        try:
            entry = await objects.enter_async_context(
                checkouts.objects.lease(
                    access.key,
                    spec.base_sha,
                    remote_url=spec.clone_url,
                    token=access.token,
                    config=credentials.git_config(spec),
                    time_limit=FETCH_TIME_LIMIT,
                )
            )
        except ObjectFetchError as exc:
            raise_unless_fetched(exc.outcome)
            raise
    return await build_workspace(
        checkouts.settings.workspaces_dir,
        clone_url=spec.clone_url,
        base_sha=spec.base_sha,
        patch=patch,
        token=access.token,
        git_config=credentials.git_config(spec),
        depth=depth,
        tags=tags,
        objects=entry,
    )


# -- prepare_workspace --------------------------------------------------------


class WorkspaceActivities:
    def __init__(self, checkouts: Checkouts) -> None:
        self.checkouts = checkouts

    @implements(workspace.prepare_workspace)
    async def prepare_workspace(
        self, actx: ActivityContext, request: PrepareInput
    ) -> PrepareResult:
        """Build the base, read the repository's config and the reproduction."""
        async with open_workspace(actx, self.checkouts, request.workspace) as ws:
            config_text, config_error = read_config(ws)
        if config_text is None and config_error is None and self.checkouts.settings.require_config:
            config_error = NO_CONFIG
        issue_body = request.issue_body
        ignored = False
        if not request.issue_repro_allowed and reproduction_from_issue(issue_body) is not None:
            issue_body, ignored = "", True
        result = resolve_commands(request.workspace.base_sha, config_text, issue_body)
        result = result.model_copy(update={"issue_repro_ignored": ignored})
        if config_error is not None:
            result = result.model_copy(update={"config": None, "config_error": config_error})
        return result


#: Why a repository without a config file gets no run (``require_config``).
NO_CONFIG = (
    f"this repository has no `{CONFIG_PATH}` yet, so repairbot does not know how to set it "
    "up or test it. Merge the onboarding pull request repairbot opened when it was "
    f"installed, or add `{CONFIG_PATH}` yourself (at least a `test:` command, and a "
    "`reproduce:` command or a fenced `repro` block in the issue), then label the issue again."
)


def read_config(ws: Workspace) -> tuple[str | None, str | None]:
    """The config file's text (``None``: no file), or why it cannot be read."""
    return read_repo_file(ws.repo, CONFIG_PATH)


def read_repo_file(root: Path, path: str) -> tuple[str | None, str | None]:
    """A file of the checkout as text (``None``: absent), or why it cannot be read.

    A symlink anywhere on the path (a linked ``.github`` included) is
    refused: it could point outside the checkout and leak the target's
    contents through our error messages.
    """
    try:
        data = read_in_checkout(root, path, limit=MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except UnsafePath:
        return None, f"{path} must be a regular file in the repository (no symlinks on its path)"
    except OSError as exc:
        return None, f"{path} cannot be read: {exc.strerror}"
    return data.decode(errors="replace"), None


def resolve_commands(base_sha: str, config_text: str | None, issue_body: str) -> PrepareResult:
    """Parse config and repro block; errors become results the workflow can post."""
    try:
        config: RepoConfig | None = parse_repo_config(config_text)
        config_error = None
    except RepoConfigError as exc:
        config, config_error = None, str(exc)
    block = reproduction_from_issue(issue_body)
    if block is not None:
        try:
            commands = reproduction_commands(block)
        except RepoConfigError as exc:
            return PrepareResult(
                base_sha=base_sha,
                config=config,
                config_error=config_error,
                reproduction=[],
                reproduction_source=None,
                reproduction_error=str(exc),
            )
        return PrepareResult(
            base_sha=base_sha,
            config=config,
            config_error=config_error,
            reproduction=commands,
            reproduction_source="issue" if commands else None,
        )
    if config is not None and config.reproduce is not None:
        return PrepareResult(
            base_sha=base_sha,
            config=config,
            config_error=config_error,
            reproduction=[config.reproduce],
            reproduction_source="config",
        )
    return PrepareResult(
        base_sha=base_sha,
        config=config,
        config_error=config_error,
        reproduction=[],
        reproduction_source=None,
        reproduction_error=(
            "no reproduction: add a ```repro block to the issue "
            f"or a `reproduce` command to {CONFIG_PATH}"
        ),
    )
