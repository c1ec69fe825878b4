"""The HTTP agent never sends what a symlink points at (issue 8, item 7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.agent.context import ContextBudget, choose_files
from app.checkout import UnsafePath, read_in_checkout
from app.workspace import Workspace, build_workspace, remove_workspace
from tests.agent.sample_repo import SampleRepo

SECRET = "-----BEGIN RSA PRIVATE KEY----- planted-secret-for-the-symlink-test"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    key = tmp_path / "outside" / "app.pem"
    key.parent.mkdir()
    key.write_text(SECRET + "\n")
    return key


async def _workspace(tmp_path: Path, repo: SampleRepo, sha: str) -> Workspace:
    return await build_workspace(
        tmp_path / "workspaces", clone_url=repo.url, base_sha=sha, patch=None
    )


async def test_a_tracked_symlink_is_never_read(
    tmp_path: Path, sample_repo: SampleRepo, key_file: Path
) -> None:
    os.symlink(key_file, sample_repo.path / "notes.txt")  # git mode 120000
    (sample_repo.path / "docs").mkdir()
    os.symlink(key_file.parent, sample_repo.path / "docs" / "linked")
    sha = sample_repo.commit({"docs/readme.md": "docs\n"}, "links")
    ws = await _workspace(tmp_path, sample_repo, sha)
    try:
        chosen = await choose_files(
            ws,
            failure_text="see notes.txt and docs/linked/app.pem",
            other_text="notes.txt",
            budget=ContextBudget(max_files=50, small_file_bytes=100_000),
        )
    finally:
        remove_workspace(ws)
    paths = [item.path for item in chosen]
    assert "notes.txt" not in paths and "calc.py" in paths
    assert not any(SECRET in item.text for item in chosen)


async def test_a_file_replaced_by_a_link_after_checkout_is_skipped(
    tmp_path: Path, sample_repo: SampleRepo, key_file: Path
) -> None:
    # What a command or agent that ran in the workspace could do to a tracked file.
    ws = await _workspace(tmp_path, sample_repo, sample_repo.base_sha)
    try:
        (ws.repo / "README.md").unlink()
        os.symlink(key_file, ws.repo / "README.md")
        chosen = await choose_files(
            ws,
            failure_text="README.md calc.py",
            other_text="",
            budget=ContextBudget(max_files=50, small_file_bytes=100_000),
        )
    finally:
        remove_workspace(ws)
    assert "README.md" not in [item.path for item in chosen]
    assert not any(SECRET in item.text for item in chosen)


def test_reads_refuse_links_on_the_way_and_other_file_kinds(tmp_path: Path, key_file: Path) -> None:
    root = tmp_path / "checkout"
    (root / "real").mkdir(parents=True)
    (root / "real" / "ok.txt").write_text("fine\n")
    os.symlink(key_file.parent, root / "dir-link")
    os.symlink(key_file, root / "file-link")
    os.mkfifo(root / "pipe")
    assert read_in_checkout(root, "real/ok.txt") == b"fine\n"
    assert read_in_checkout(root, "real/ok.txt", limit=2) == b"fi"
    for path in ("dir-link/app.pem", "file-link", "pipe", "../outside/app.pem", "real"):
        with pytest.raises((UnsafePath, IsADirectoryError)):
            read_in_checkout(root, path)
    with pytest.raises(FileNotFoundError):
        read_in_checkout(root, "real/missing.txt")
