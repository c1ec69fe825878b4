"""Workspaces carry the history and tags the repository's ``checkout:`` asks for,
so version tools (setuptools-scm, ``git describe``) see what they would in a clone."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.contracts.workspace import WorkspaceSpec
from app.engine._typed import dump_input
from app.repo_config import CheckoutConfig, Command, parse_repo_config
from app.workspace import build_workspace, remove_workspace
from tests.agent.sample_repo import SampleRepo, git


def describe(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "describe", "--tags"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )


def tagged(sample_repo: SampleRepo) -> str:
    """v1.2.0 two commits below the head."""
    git(sample_repo.path, "tag", "v1.2.0", sample_repo.base_sha)
    sample_repo.commit({"a.txt": "a"}, "one")
    sha = sample_repo.commit({"b.txt": "b"}, "two")
    return sha


async def test_history_and_tags_when_asked(sample_repo: SampleRepo, tmp_path: Path) -> None:
    sha = tagged(sample_repo)
    ws = await build_workspace(
        tmp_path, clone_url=sample_repo.url, base_sha=sha, patch=None, depth=0, tags=True
    )
    try:
        described = describe(ws.repo)
        assert described.stdout.strip().startswith("v1.2.0-2-g"), described.stderr
    finally:
        remove_workspace(ws)


async def test_the_commit_alone_by_default(sample_repo: SampleRepo, tmp_path: Path) -> None:
    sha = tagged(sample_repo)
    ws = await build_workspace(tmp_path, clone_url=sample_repo.url, base_sha=sha, patch=None)
    try:
        assert describe(ws.repo).returncode != 0  # no tags, one commit
    finally:
        remove_workspace(ws)


def test_the_setting_and_its_bounds() -> None:
    config = parse_repo_config("checkout: {depth: 0, tags: true}\n")
    assert config.checkout == CheckoutConfig(depth=0, tags=True)
    assert parse_repo_config(None).checkout == CheckoutConfig(depth=1, tags=False)


def test_a_spec_without_checkout_is_recorded_as_before() -> None:
    """Runs recorded before ``checkout`` existed hash their inputs the same."""
    spec = WorkspaceSpec(repo="o/r", clone_url="file:///r", base_sha="a" * 40)
    assert "checkout" not in dump_input(spec)
    deeper = spec.model_copy(update={"checkout": CheckoutConfig(depth=0, tags=True)})
    assert dump_input(deeper)["checkout"] == {"depth": 0, "tags": True}


class _Ctx:
    """Just what building activity inputs needs from a workflow context."""

    run_id = "repair:o/r#1/1"

    def set_query(self, name: str, handler: object) -> None:
        pass

    def pending_signals(self, name: str) -> int:
        return 0  # no repository_moved signal waits


def test_the_repositorys_checkout_setting_reaches_every_workspace() -> None:
    from app.contracts.requests import RunRequest
    from app.workflows.repair_base import RunBase

    request = RunRequest(
        repo="o/r",
        default_branch="main",
        clone_url="file:///r",
        installation_id=1,
        issue_number=1,
        issue_title="t",
        requested_by="maya",
    )
    run = RunBase(_Ctx(), request)  # type: ignore[arg-type]
    assert run.spec("a" * 40).checkout is None  # the default: recorded as before
    run.config = parse_repo_config("checkout: {depth: 0, tags: true}\n")
    assert run.spec("a" * 40).checkout == CheckoutConfig(depth=0, tags=True)
    run.reproduction = [Command(shell="make repro")]
    assert run.verify_input("a" * 40, None).workspace.checkout == CheckoutConfig(depth=0, tags=True)
