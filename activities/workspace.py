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
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from activities._support import (
    keep_alive,
    optional_dep,
    read_evidence,
)
from app.checkout import UnsafePath, read_in_checkout
from app.config import Settings
from app.engine import (
    ActivityContext,
    ActivityDefn,
    PermanentError,
    RetryPolicy,
    Timeouts,
    TransientError,
    typed_activity,
)
from app.evidence import EvidenceRef, EvidenceStore
from app.repo_config import (
    CONFIG_PATH,
    MAX_CONFIG_BYTES,
    CheckoutConfig,
    Command,
    RepoConfig,
    RepoConfigError,
    parse_repo_config,
    reproduction_commands,
    reproduction_from_issue,
)
from app.workspace import (
    CheckoutRefused,
    CommitNotFound,
    FetchFailed,
    PatchRejected,
    Workspace,
    build_workspace,
    remove_workspace,
)

log = logging.getLogger("repairbot.activities")


class WorkspaceSpec(BaseModel):
    """Everything a workspace is rebuilt from; recorded in history."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``owner/name``: for credentials and logs.
    repo: str
    clone_url: str
    base_sha: str
    installation_id: int | None = None
    #: The candidate patch, applied (staged) on top of the base.
    patch: EvidenceRef | None = None
    #: History depth and tags (the repository's ``checkout:``); None: the commit alone.
    checkout: CheckoutConfig | None = None

    @model_serializer(mode="wrap")
    def _without_default_checkout(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Specs recorded before ``checkout`` existed must hash the same (replay).
        data = handler(self)
        if isinstance(data, dict) and data.get("checkout") is None:
            data.pop("checkout", None)
        return data


class GitCredentials:
    """How a worker authenticates git fetches (a shared client, via ``actx.dep``).

    This base sends no credentials: right for public and local (``file://``)
    repositories, and what a worker without any registered uses.
    """

    async def token(self, spec: WorkspaceSpec) -> str | None:
        """A token for reading ``spec.repo`` (sent to ``spec.clone_url`` only)."""
        return None

    def git_config(self, spec: WorkspaceSpec) -> Sequence[tuple[str, str]]:
        """Extra git settings for fetching ``spec.clone_url`` (a proxy, a protocol)."""
        return ()


#: Reading the code is all a fetch needs.
FETCH_PERMISSIONS = {"contents": "read"}


class InstallationGit(GitCredentials):
    """An installation token for the one repository, read-only, from
    ``token_for(installation_id, repo, permissions)``."""

    def __init__(self, token_for: Callable[[int, str, Mapping[str, str]], Awaitable[str]]) -> None:
        self._token_for = token_for

    async def token(self, spec: WorkspaceSpec) -> str | None:
        if spec.installation_id is None:
            return None
        return await self._token_for(spec.installation_id, spec.repo, FETCH_PERMISSIONS)


class PatchRejectedError(PermanentError):
    """The recorded candidate patch does not apply to the recorded base."""


def read_patch(store: EvidenceStore, ref: EvidenceRef | None) -> str | None:
    # surrogateescape: a patch of a non-UTF-8 file must reach git byte for byte.
    return None if ref is None else read_evidence(store, ref).decode(errors="surrogateescape")


@contextlib.asynccontextmanager
async def open_workspace(actx: ActivityContext, spec: WorkspaceSpec) -> AsyncIterator[Workspace]:
    """A fresh workspace for ``spec``, removed when the block ends.

    Build failures carry their retryability: an unreachable remote is
    transient; a missing commit or a patch that does not apply never heals.
    """
    settings = actx.dep(Settings)
    patch = read_patch(actx.dep(EvidenceStore), spec.patch)
    credentials = optional_dep(actx, GitCredentials) or GitCredentials()
    token = await credentials.token(spec)
    try:
        ws = await keep_alive(
            actx,
            build_workspace(
                settings.workspaces_dir,
                clone_url=spec.clone_url,
                base_sha=spec.base_sha,
                patch=patch,
                token=token,
                git_config=credentials.git_config(spec),
                depth=spec.checkout.depth if spec.checkout else 1,
                tags=spec.checkout.tags if spec.checkout else False,
            ),
            doing=f"fetching {spec.repo}@{spec.base_sha[:12]}",
        )
    except FetchFailed as exc:
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


# -- prepare_workspace --------------------------------------------------------


class PrepareInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workspace: WorkspaceSpec
    issue_body: str = ""
    #: Whether the issue's repro block may be used (its author has write access);
    #: when not, the repository's configured reproduction runs instead.
    issue_repro_allowed: bool = True


class PrepareResult(BaseModel):
    base_sha: str
    #: The repository's config (defaults when it has no file); None if invalid.
    config: RepoConfig | None
    #: Why the config is unusable, worded for the issue.
    config_error: str | None = None
    #: The reproduction commands: the issue's repro block, else the config's.
    reproduction: list[Command]
    reproduction_source: Literal["issue", "config"] | None
    reproduction_error: str | None = None
    #: The issue had a repro block that was not used (its author may not write).
    issue_repro_ignored: bool = False


@typed_activity(
    "workspace.prepare",
    retry=RetryPolicy(initial_interval=2.0, max_interval=60.0, max_attempts=5),
    timeouts=Timeouts(start_to_close=20 * 60, heartbeat=60, schedule_to_close=60 * 60),
)
async def prepare_workspace(actx: ActivityContext, request: PrepareInput) -> PrepareResult:
    """Build the base, read the repository's config and the reproduction."""
    async with open_workspace(actx, request.workspace) as ws:
        config_text, config_error = read_config(ws)
    if config_text is None and config_error is None and actx.dep(Settings).require_config:
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


ACTIVITIES: list[ActivityDefn] = [prepare_workspace]
