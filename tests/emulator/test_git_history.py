"""What the emulator remembers of git, and what it never does: answers about
commits are kept (a sha names its whole history), refs are read at every call,
so a push is seen by the next read and changes its ``ETag``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from emu_helpers import World

from emulator import git as emulator_git
from emulator.app import Emulator
from emulator.git import BareRepo, GitError, Identity
from emulator.rest import http as emulator_http

ALICE = Identity("Alice", "alice@example.invalid", "2024-02-01T10:00:00+02:00")


@pytest.fixture
def git_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Every git command the emulator runs from now on (its arguments)."""
    runs: list[list[str]] = []
    real = emulator_git._run_git

    def counted(args: Any, **kwargs: Any) -> Any:
        runs.append(list(args))
        return real(args, **kwargs)

    monkeypatch.setattr(emulator_git, "_run_git", counted)
    yield runs


def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(args: Any, **kwargs: Any) -> Any:
        raise GitError(f"git was run: {list(args)}")

    monkeypatch.setattr(emulator_git, "_run_git", refused)


def test_answers_about_commits_are_asked_of_git_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, root, tip = _two_commits(tmp_path)
    remembering = BareRepo(repo.path, history={})
    first = (
        remembering.compare(root, tip),
        remembering.is_ancestor(root, tip),
        remembering.commit_info(tip),
        remembering.mergeable(root, tip),
    )
    _no_git(monkeypatch)
    again = (
        remembering.compare(root, tip),
        remembering.is_ancestor(root, tip),
        remembering.commit_info(tip),
        remembering.mergeable(root, tip),
    )
    assert again == first and first[0].ahead_by == 1 and first[1] and first[3]
    # A branch name is not a commit: where it points is asked of git every time.
    with pytest.raises(GitError):
        remembering.compare("main", "feature")


async def test_a_push_to_the_head_is_seen_by_the_next_pull_request_read(
    world: World, make_branch: Any
) -> None:
    number = await _open_pull(world, make_branch)
    path = f"/repos/octo/demo/pulls/{number}"
    async with _http(world) as http:
        first = await http.get(path)
        pushed = await make_branch("feature", {"b.txt": "b\n"})
        after = await http.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert first.json()["commits"] == 1
    assert after.status_code == 200 and after.headers["etag"] != first.headers["etag"]
    assert after.json()["head"]["sha"] == pushed["sha"] and after.json()["commits"] == 2


async def test_a_pull_request_read_runs_no_git_once_its_commits_are_known(
    world: World, make_branch: Any, git_runs: list[list[str]]
) -> None:
    number = await _open_pull(world, make_branch)
    async with _http(world) as http:
        await http.get(f"/repos/octo/demo/pulls/{number}")
        git_runs.clear()
        again = await http.get(f"/repos/octo/demo/pulls/{number}")
    assert again.status_code == 200
    # Head and base are read from their loose ref files, and their commits are
    # known: nothing is asked of git again.
    assert git_runs == []


def _two_commits(tmp_path: Path) -> tuple[BareRepo, str, str]:
    """A repository whose ``main`` is ``root`` and ``feature`` is ``tip`` (one ahead)."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.txt").write_text("one\n")
    repo = BareRepo.create(tmp_path / "repo.git", source=source)
    root = repo.resolve("main")
    assert root is not None
    tip = repo.write_commit(root, {"b.txt": b"two\n"}, "Add b", ALICE)
    repo.create_ref("refs/heads/feature", tip)
    return repo, root, tip


def _git(repo: BareRepo, *args: str) -> str:
    """Git run on the repository behind the emulator's back (as another push would)."""
    done = subprocess.run(
        ["git", "--git-dir", str(repo.path), *args], capture_output=True, check=True, text=True
    )
    return done.stdout.strip()


def test_a_branch_moved_behind_the_emulators_back_is_seen_by_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, root, tip = _two_commits(tmp_path)
    remembering = BareRepo(repo.path, history={})
    assert remembering.resolve_all(["refs/heads/feature", root]) == [tip, root]
    _git(repo, "update-ref", "refs/heads/feature", root)
    _no_git(monkeypatch)
    # Where a branch points is never remembered: its ref file is read again.
    assert remembering.resolve("refs/heads/feature") == root
    assert remembering.ref_sha("refs/heads/feature") == root


def test_a_packed_branch_is_asked_of_git(tmp_path: Path, git_runs: list[list[str]]) -> None:
    repo, _, tip = _two_commits(tmp_path)
    remembering = BareRepo(repo.path, history={})
    assert remembering.resolve("refs/heads/feature") == tip
    _git(repo, "pack-refs", "--all", "--prune")
    _git(repo, "update-ref", "refs/heads/main", tip)  # loose again, over its packed value
    git_runs.clear()
    assert remembering.ref_sha("refs/heads/feature") == tip
    assert [run for run in git_runs if "for-each-ref" in run]
    git_runs.clear()
    assert remembering.resolve("refs/heads/main") == tip  # the loose file wins, as in git
    assert remembering.ref_sha("refs/heads/main") == tip
    assert git_runs == []


def test_a_symbolic_ref_is_asked_of_git(tmp_path: Path) -> None:
    repo, _, tip = _two_commits(tmp_path)
    _git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/feature")
    remembering = BareRepo(repo.path, history={})
    assert remembering.ref_sha("refs/heads/alias") == tip
    assert remembering.resolve("refs/heads/alias") == tip


def test_only_commits_are_remembered(tmp_path: Path, git_runs: list[list[str]]) -> None:
    repo, _, tip = _two_commits(tmp_path)
    tree = _git(repo, "rev-parse", f"{tip}^{{tree}}")
    remembering = BareRepo(repo.path, history={})
    git_runs.clear()
    for _ in range(2):
        assert remembering.resolve(tree) is None
    assert len([run for run in git_runs if "cat-file" in run]) == 2
    git_runs.clear()
    for _ in range(2):
        assert remembering.resolve(tip) == tip
    assert len([run for run in git_runs if "cat-file" in run]) == 1


def test_a_ref_file_is_read_only_under_a_valid_ref_name(tmp_path: Path) -> None:
    repo, root, _ = _two_commits(tmp_path)
    (repo.path / "evil").write_text(f"{root}\n")
    assert repo._loose_ref("refs/heads/../../evil") is None
    assert repo._loose_ref("refs/heads/main") == root


async def test_a_ref_name_git_would_refuse_is_not_found(world: World) -> None:
    async with _http(world) as http:
        ref = await http.get("/repos/octo/demo/git/ref/heads/a..b")
        branch = await http.get("/repos/octo/demo/branches/a..b")
        found = await http.get("/repos/octo/demo/branches/main")
    assert ref.status_code == 404 and branch.status_code == 404
    assert found.status_code == 200 and found.json()["name"] == "main"


async def test_creating_a_ref_lists_no_branches_when_the_default_branch_exists(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def listed(self: BareRepo, prefix: str = "refs/") -> dict[str, str]:
        raise AssertionError(f"every ref under {prefix} was listed")

    async with _http(world) as http:
        head = (await http.get("/repos/octo/demo/git/ref/heads/main")).json()["object"]["sha"]
        monkeypatch.setattr(BareRepo, "list_refs", listed)
        created = await http.post(
            "/repos/octo/demo/git/refs", json={"ref": "refs/heads/other", "sha": head}
        )
    assert created.status_code == 201


async def test_a_repository_without_its_default_branch_is_empty_only_without_branches(
    world: World,
) -> None:
    async with _http(world) as http:
        head = (await http.get("/repos/octo/demo/git/ref/heads/main")).json()["object"]["sha"]
        await http.post("/repos/octo/demo/git/refs", json={"ref": "refs/heads/keep", "sha": head})
        assert (await http.delete("/repos/octo/demo/git/refs/heads/main")).status_code == 204
        another = await http.post(
            "/repos/octo/demo/git/refs", json={"ref": "refs/heads/more", "sha": head}
        )
    await world.client.create_repo_from_folder("octo", "empty", None)
    async with _http(world, "octo") as http:
        empty = await http.post(
            "/repos/octo/empty/git/refs", json={"ref": "refs/heads/x", "sha": head}
        )
    assert another.status_code == 201
    assert empty.status_code == 409 and empty.json()["message"] == "Git Repository is empty."


async def test_an_unthreaded_emulator_answers_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a handler ran in a worker thread")

    monkeypatch.setattr(emulator_http.anyio.to_thread, "run_sync", no_thread)
    emu = Emulator(root=tmp_path / "emu", threaded=False)
    try:
        transport = httpx.ASGITransport(app=emu.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as http:
            answer = await http.get("/repos/octo/none")
    finally:
        emu.close()
    assert answer.status_code == 404  # answered (no such repository), not raised


async def _open_pull(world: World, make_branch: Any) -> int:
    """A pull request from a new branch ``feature`` one commit ahead of ``main``."""
    await make_branch("feature", {"a.txt": "a\n"})
    opened = await world.client.rest(
        "POST",
        "/repos/octo/demo/pulls",
        as_user="alice",
        body={"title": "t", "head": "feature", "base": "main"},
    )
    return int(opened["number"])


def _http(world: World, login: str = "alice") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=world.client.api_url,
        transport=httpx.ASGITransport(app=world.emulator.asgi()),
        headers={"Authorization": f"token {world.client.tokens[login]}"},
    )
