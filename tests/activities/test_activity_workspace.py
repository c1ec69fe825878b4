"""prepare_workspace: the base builds; config and reproduction are read at that commit."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from activities.workspace import GitCredentials, InstallationGit
from app.config import Settings
from app.contracts.workspace import WorkspaceSpec, prepare_workspace
from app.engine._errors import PermanentError, TransientError
from app.evidence import DatabaseEvidenceStore, EvidenceStore
from app.evidence.database import blobs
from app.github.auth import InstallationToken
from app.github.errors import InstallationSuspended
from app.github.objcache import CacheKey, FetchAccess, ObjectCache
from app.repo_config import CheckoutConfig
from app.sandbox.runner import Sandbox
from tests.activities.support import Dependencies, RecordingContext, call
from tests.agent.sample_repo import SampleRepo

_LATER = datetime(2100, 1, 1, tzinfo=UTC)

CONFIG = """
setup: [echo ready]
reproduce: [python, -c, "from calc import add; assert add(2, 3) == 5"]
test: python -m unittest -q
agent: {backend: command, command: [fix-it]}
budgets: {repair_attempts: 2}
"""


def at(spec: WorkspaceSpec, sha: str) -> WorkspaceSpec:
    return spec.model_copy(update={"base_sha": sha})


async def test_config_and_its_reproduction(
    actx: RecordingContext, spec: WorkspaceSpec, sample_repo: SampleRepo
) -> None:
    sha = sample_repo.commit({".github/repairbot.yml": CONFIG}, "configure repairbot")
    result = await call(
        prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")}
    )
    assert result["config_error"] is None and result["base_sha"] == sha
    assert result["config"]["budgets"]["repair_attempts"] == 2
    assert result["config"]["setup"] == [{"argv": None, "shell": "echo ready"}]
    assert result["reproduction_source"] == "config"
    assert result["reproduction"][0]["argv"][:2] == ["python", "-c"]
    assert actx.heartbeats == [] or all("doing" in h for h in actx.heartbeats)


async def test_the_issue_repro_block_wins_and_is_argv(
    actx: RecordingContext, spec: WorkspaceSpec, sample_repo: SampleRepo
) -> None:
    sha = sample_repo.commit({".github/repairbot.yml": CONFIG}, "configure repairbot")
    body = (
        "It breaks:\n\n```repro\n"
        "python -c 'import calc; assert calc.add(1, 1) == 2' && rm -rf /\n```\n"
    )
    result = await call(
        prepare_workspace,
        actx,
        {"workspace": at(spec, sha).model_dump(mode="json"), "issue_body": body},
    )
    assert result["reproduction_source"] == "issue"
    assert result["reproduction"] == [
        {
            "argv": [
                "python",
                "-c",
                "import calc; assert calc.add(1, 1) == 2",
                "&&",
                "rm",
                "-rf",
                "/",
            ],
            "shell": None,
        }
    ]


async def test_an_invalid_config_is_a_result_for_the_issue(
    actx: RecordingContext, spec: WorkspaceSpec, sample_repo: SampleRepo
) -> None:
    sha = sample_repo.commit({".github/repairbot.yml": "merge_method: yolo\n"}, "bad config")
    result = await call(
        prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")}
    )
    assert result["config"] is None
    assert "`merge_method`" in result["config_error"] and "'yolo'" in result["config_error"]
    assert result["reproduction"] == [] and "no reproduction" in result["reproduction_error"]


async def test_a_config_symlink_is_refused(
    actx: RecordingContext, spec: WorkspaceSpec, sample_repo: SampleRepo
) -> None:
    (sample_repo.path / ".github").mkdir()
    os.symlink("/etc/passwd", sample_repo.path / ".github" / "repairbot.yml")
    sha = sample_repo.commit({}, "sneaky")
    result = await call(
        prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")}
    )
    assert result["config_error"] == (
        ".github/repairbot.yml must be a regular file in the repository (no symlinks on its path)"
    )


async def test_a_symlinked_github_directory_is_refused(
    actx: RecordingContext, spec: WorkspaceSpec, sample_repo: SampleRepo, tmp_path: Path
) -> None:
    # .github -> a directory elsewhere holding a perfectly valid config: still refused.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "repairbot.yml").write_text("test: [echo, secret-config]\n")
    os.symlink(elsewhere, sample_repo.path / ".github")
    sha = sample_repo.commit({}, "linked .github")
    result = await call(
        prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")}
    )
    assert result["config"] is None and "no symlinks on its path" in result["config_error"]


async def test_no_config_means_no_run(actx: RecordingContext, spec: WorkspaceSpec) -> None:
    """REPAIRBOT_REQUIRE_CONFIG (the default): a repository that never chose its
    commands is not repaired with guessed ones; the issue is told what to add."""
    body = "```repro\nmake bug\n```"
    result = await call(
        prepare_workspace, actx, {"workspace": spec.model_dump(mode="json"), "issue_body": body}
    )
    assert result["config"] is None
    assert "has no `.github/repairbot.yml` yet" in result["config_error"]
    assert "onboarding pull request" in result["config_error"]


async def test_no_config_means_defaults_when_the_operator_allows_it(
    settings: Settings, evidence: EvidenceStore, spec: WorkspaceSpec
) -> None:
    allowed = replace(settings, require_config=False)
    actx = RecordingContext(Dependencies(allowed, evidence, Sandbox(heartbeat_interval=0.05)))
    body = "```repro\nmake bug\n```"
    result = await call(
        prepare_workspace, actx, {"workspace": spec.model_dump(mode="json"), "issue_body": body}
    )
    assert result["config"]["merge_method"] == "squash" and result["reproduction_source"] == "issue"


async def test_build_failures_carry_their_retryability(
    actx: RecordingContext, spec: WorkspaceSpec, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    gone = spec.model_copy(update={"clone_url": (tmp_path / "gone").as_uri()})
    with pytest.raises(TransientError, match="fetch failed"):
        await call(prepare_workspace, actx, {"workspace": gone.model_dump(mode="json")})
    missing = spec.model_copy(update={"base_sha": "2" * 40})
    old_protocol = _Protocol0()
    actx.deps.add(old_protocol)
    with pytest.raises(PermanentError, match="has no commit"):
        await call(prepare_workspace, actx, {"workspace": missing.model_dump(mode="json")})


async def test_a_corrupt_patch_is_permanent(
    actx: RecordingContext, spec: WorkspaceSpec, evidence: EvidenceStore
) -> None:
    ref = evidence.put(b"not a patch at all\n", kind="patch", name="p")
    bad = spec.model_copy(update={"patch": ref})
    with pytest.raises(PermanentError, match="does not apply"):
        await call(prepare_workspace, actx, {"workspace": bad.model_dump(mode="json")})
    assert isinstance(evidence, DatabaseEvidenceStore)
    with evidence.engine.begin() as conn:
        conn.execute(
            update(blobs)
            .where(blobs.c.sha256 == ref.sha256)
            .values(encoding="identity", data=b"tampered\n")
        )
    with pytest.raises(PermanentError, match="altered"):
        await call(prepare_workspace, actx, {"workspace": bad.model_dump(mode="json")})


async def test_installation_credentials_ask_for_a_token_per_installation(
    spec: WorkspaceSpec,
) -> None:
    asked: list[tuple[int, str, dict[str, str]]] = []

    async def token_for(
        installation_id: int, repo: str, permissions: Mapping[str, str]
    ) -> InstallationToken:
        asked.append((installation_id, repo, dict(permissions)))
        return InstallationToken("ghs_token", _LATER, repository_ids=(7,))

    creds = InstallationGit(token_for)
    access = await creds.access(spec.model_copy(update={"installation_id": 42}))
    # One repository, read-only: all a fetch needs.
    assert asked == [(42, "octo/calc", {"contents": "read"})] and access.token == "ghs_token"
    # Its objects are cached under the installation and the id the mint answered.
    assert access.key == CacheKey(42, 7)
    assert await creds.token(spec) is None


async def test_a_fetch_failure_of_a_suspended_installation_is_the_suspension(
    actx: RecordingContext, spec: WorkspaceSpec, tmp_path: Path
) -> None:
    """Git answers a suspended installation's token with a bare 401: the
    failure is read as the suspension (the run then waits for the unsuspend)
    only when GitHub says the installation is suspended."""
    asked: list[int] = []

    async def token_for(
        installation_id: int, repo: str, permissions: Mapping[str, str]
    ) -> InstallationToken:
        return InstallationToken("ghs_token", _LATER)

    async def is_suspended(installation_id: int) -> bool:
        asked.append(installation_id)
        return True

    actx.deps.add(InstallationGit(token_for, is_suspended))
    gone = spec.model_copy(
        update={"clone_url": (tmp_path / "gone").as_uri(), "installation_id": 42}
    )
    with pytest.raises(InstallationSuspended, match="has been suspended"):
        await call(prepare_workspace, actx, {"workspace": gone.model_dump(mode="json")})
    assert asked == [42]


class _Protocol0(GitCredentials):
    """Makes git use protocol v0, where servers refuse unadvertised commits."""

    def git_config(self, spec: WorkspaceSpec) -> list[tuple[str, str]]:
        return [("protocol.version", "0")]


class _CachedRepository(GitCredentials):
    """As the worker's installation credentials: a key for the repository's objects."""

    def __init__(self, key: CacheKey | None) -> None:
        self.key = key

    async def access(self, spec: WorkspaceSpec) -> FetchAccess:
        return FetchAccess(None, self.key)


async def test_workspaces_of_one_repository_fetch_its_base_once_per_worker(
    actx: RecordingContext, spec: WorkspaceSpec, settings: Settings, sample_repo: SampleRepo
) -> None:
    cache = ObjectCache(settings.git_cache_dir)
    actx.deps.add(cache)
    actx.deps.add(_CachedRepository(CacheKey(1, 100)))
    sha = sample_repo.commit({".github/repairbot.yml": CONFIG}, "configure repairbot")
    for _ in range(2):
        result = await call(
            prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")}
        )
        assert result["config_error"] is None
    assert cache.fetches == 1
    # A missing commit is the same permanent failure as without the cache.
    with pytest.raises(PermanentError, match="no commit"):
        await call(
            prepare_workspace, actx, {"workspace": at(spec, "0" * 40).model_dump(mode="json")}
        )
    assert cache.fetches == 2  # tried, and nothing kept
    # Credentials that name no repository id (no GitHub App): nothing is cached.
    actx.deps.add(_CachedRepository(None))
    await call(prepare_workspace, actx, {"workspace": at(spec, sha).model_dump(mode="json")})
    assert cache.fetches == 2  # the cache was not asked
    # More history or the tags: fetched into the workspace, never from the cache.
    actx.deps.add(_CachedRepository(CacheKey(1, 100)))
    newer = sample_repo.commit({"NOTES.md": "more history\n"}, "more history")
    deeper = at(spec, newer).model_copy(update={"checkout": CheckoutConfig(depth=0)})
    await call(prepare_workspace, actx, {"workspace": deeper.model_dump(mode="json")})
    assert cache.fetches == 2
    cache.close()
