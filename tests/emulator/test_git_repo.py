"""emulator.git.BareRepo against real bare repositories: refs, objects, merges."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from emulator.git import (
    BareRepo,
    Identity,
    InvalidRefName,
    MergeConflict,
    NotFastForward,
    ObjectNotFound,
    RefConflict,
    qualify_ref,
)

ALICE = Identity("Alice", "alice@example.invalid", "2024-02-01T10:00:00+02:00")
BOB = Identity("Bob", "bob@example.invalid", "2024-02-02T10:00:00+00:00")
MERGER = Identity("Merger", "merger@example.invalid", "2024-03-01T00:00:00+00:00")
GITHUB = Identity("GitHub", "noreply@github.com", "2024-03-01T00:00:00+00:00")


@pytest.fixture
def repo(tmp_path: Path) -> BareRepo:
    source = tmp_path / "source"
    (source / "src").mkdir(parents=True)
    (source / "a.txt").write_text("one\ntwo\nthree\n")
    (source / "src" / "app.py").write_text("print('hi')\n")
    (source / ".gitignore").write_text("*.log\n")
    (source / "debug.log").write_text("ignored\n")
    return BareRepo.create(tmp_path / "octo" / "repo.git", source=source)


def _branch(repo: BareRepo, name: str, commit: str) -> str:
    repo.create_ref(f"refs/heads/{name}", commit)
    return commit


@pytest.fixture
def diverged(repo: BareRepo) -> tuple[BareRepo, str, str, str]:
    """main: root -> m1 (edits line 3); feature: root -> f1 (edits line 1) -> f2 (adds b.txt)."""
    root = repo.resolve("main")
    assert root
    f1 = repo.write_commit(root, {"a.txt": b"ONE\ntwo\nthree\n"}, "Edit line one", ALICE)
    f2 = repo.write_commit(f1, {"b.txt": b"new file\n"}, "Add b\n\nWith a body.", BOB)
    _branch(repo, "feature", f2)
    m1 = repo.write_commit(root, {"a.txt": b"one\ntwo\nTHREE\n"}, "Edit line three", BOB)
    repo.update_ref("main", m1, old_sha=root)
    return repo, root, m1, f2


# ------------------------------------------------------------------ creation and reading


def test_create_commits_the_source_folder_deterministically(tmp_path: Path, repo: BareRepo) -> None:
    assert repo.default_branch() == "main"
    head = repo.resolve("main")
    assert head is not None
    info = repo.commit_info(head)
    assert info.parents == ()
    assert (info.author_name, info.author_email) == ("Emulator", "emulator@example.invalid")
    assert info.committer_date == datetime(2024, 1, 1, tzinfo=UTC)
    assert repo.read_file(head, "a.txt") == b"one\ntwo\nthree\n"
    assert repo.read_file(head, "src/app.py") == b"print('hi')\n"
    assert repo.read_file(head, "debug.log") is None  # .gitignore honoured
    assert repo.read_file(head, "src") is None  # a directory is not a file
    again = BareRepo.create(tmp_path / "again.git", source=tmp_path / "source")
    assert again.resolve("main") == head


def test_create_empty_repository(tmp_path: Path) -> None:
    empty = BareRepo.create(tmp_path / "empty.git", default_branch="trunk")
    assert empty.list_refs() == {}
    assert empty.default_branch() == "trunk"
    assert empty.resolve("trunk") is None


def test_resolve_accepts_every_spelling_and_rejects_revision_syntax(repo: BareRepo) -> None:
    head = repo.list_refs()["refs/heads/main"]
    for spelling in ("main", "heads/main", "refs/heads/main", "HEAD", head, head[:10]):
        assert repo.resolve(spelling) == head, spelling
    for bad in ("nope", "main~1", "main^", "--all", "main:a.txt", "", "a b", "0" * 40):
        assert repo.resolve(bad) is None, bad


def test_list_refs_filters_by_plain_prefix(repo: BareRepo) -> None:
    head = repo.resolve("main")
    assert head
    for name in ("feature-a", "feature-b", "fix"):
        _branch(repo, name, head)
    assert set(repo.list_refs("refs/heads/feat")) == {
        "refs/heads/feature-a",
        "refs/heads/feature-b",
    }
    assert len(repo.list_refs()) == 4


def test_commit_info_and_tree_listing(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    sha = repo.write_commit(root, {"docs/x.md": b"# x\n"}, "Title\n\nBody line\n", ALICE, BOB)
    info = repo.commit_info(sha)
    assert info.sha == sha and info.parents == (root,)
    assert info.message == "Title\n\nBody line"
    assert (info.author_name, info.committer_name) == ("Alice", "Bob")
    assert info.author_date == datetime(2024, 2, 1, 8, 0, tzinfo=UTC)
    entries = repo.list_tree(sha)
    assert entries is not None
    assert {e.path: e.type for e in entries} == {
        ".gitignore": "blob",
        "a.txt": "blob",
        "docs": "tree",
        "src": "tree",
    }
    assert [(e.path, e.size) for e in repo.list_tree(sha, "docs") or []] == [("docs/x.md", 4)]
    assert repo.list_tree(sha, "a.txt") is None
    with pytest.raises(ObjectNotFound):
        repo.commit_info("f" * 40)


def test_write_commit_adds_changes_and_deletes_without_touching_refs(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    sha = repo.write_commit(
        root, {"a.txt": b"changed\n", "new/deep/f.bin": b"\x00\x01", "src/app.py": None}, "m", ALICE
    )
    assert repo.resolve("main") == root
    assert repo.read_file(sha, "a.txt") == b"changed\n"
    assert repo.read_file(sha, "new/deep/f.bin") == b"\x00\x01"
    assert repo.read_file(sha, "src/app.py") is None
    orphan = repo.write_commit(None, {"only.txt": b"x"}, "root", ALICE)
    assert repo.commit_info(orphan).parents == ()
    assert [e.path for e in repo.list_tree(orphan) or []] == ["only.txt"]


# ------------------------------------------------------------------ moving refs


def test_update_ref_is_conditional(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    child = repo.write_commit(root, {"c": b"c"}, "child", ALICE)
    with pytest.raises(RefConflict) as exc:
        repo.update_ref("main", child, old_sha=child)
    assert (exc.value.expected, exc.value.actual) == (child, root)
    repo.update_ref("refs/heads/main", child, old_sha=root)
    assert repo.resolve("main") == child
    with pytest.raises(RefConflict):
        repo.update_ref("main", root, old_sha="")  # must-not-exist, but it does
    with pytest.raises(RefConflict):
        repo.create_ref("heads/main", root)


def test_update_ref_refuses_non_fast_forward_unless_forced(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    other = repo.write_commit(None, {"x": b"x"}, "unrelated", ALICE)
    with pytest.raises(NotFastForward):
        repo.update_ref("main", other, force=False)
    assert repo.resolve("main") == root
    child = repo.write_commit(root, {"c": b"c"}, "child", ALICE)
    repo.update_ref("main", child, force=False)
    repo.update_ref("main", other, force=True)
    assert repo.resolve("main") == other


def test_create_and_delete_ref(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    repo.create_ref("feature", root)
    assert repo.ref_sha("refs/heads/feature") == root
    with pytest.raises(RefConflict):
        repo.delete_ref("feature", old_sha="1" * 40)
    repo.delete_ref("feature", old_sha=root)
    assert repo.ref_sha("feature") is None
    with pytest.raises(ObjectNotFound):
        repo.delete_ref("feature")
    with pytest.raises(ObjectNotFound):
        repo.create_ref("ghost", "e" * 40)


@pytest.mark.parametrize(
    "name", ["a..b", "x.lock", "-x", "sp ace", "tab\tx", "end/", "end.", "a//b", "q?", "@{x}"]
)
def test_invalid_ref_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidRefName):
        qualify_ref(name)


def test_qualify_ref() -> None:
    assert qualify_ref("main") == "refs/heads/main"
    assert qualify_ref("heads/a/b") == "refs/heads/a/b"
    assert qualify_ref("tags/v1") == "refs/tags/v1"
    assert qualify_ref("refs/pull/1/head") == "refs/pull/1/head"


# ------------------------------------------------------------------ history questions


def test_compare_ancestry_and_merge_base(diverged: tuple[BareRepo, str, str, str]) -> None:
    repo, root, m1, f2 = diverged
    comparison = repo.compare("main", "feature")
    assert (comparison.ahead_by, comparison.behind_by, comparison.status) == (2, 1, "diverged")
    assert comparison.merge_base == root
    assert comparison.commits[-1] == f2 and len(comparison.commits) == 2
    assert repo.compare(root, m1).status == "ahead"
    assert repo.compare(m1, root).status == "behind"
    assert repo.compare(m1, m1).status == "identical"
    assert repo.is_ancestor(root, f2) and not repo.is_ancestor(m1, f2)
    assert repo.merge_base(m1, f2) == root
    orphan = repo.write_commit(None, {"x": b"x"}, "unrelated", ALICE)
    assert repo.merge_base(orphan, m1) is None


# ------------------------------------------------------------------ merges


def test_merge_makes_a_two_parent_commit(diverged: tuple[BareRepo, str, str, str]) -> None:
    repo, _, m1, f2 = diverged
    assert repo.mergeable(m1, f2)
    new = repo.merge(
        "main",
        f2,
        method="merge",
        title="Merge pull request #1",
        message="Body",
        author=MERGER,
        committer=GITHUB,
    )
    assert repo.resolve("main") == new
    info = repo.commit_info(new)
    assert info.parents == (m1, f2)
    assert info.message == "Merge pull request #1\n\nBody"
    assert (info.author_name, info.committer_name) == ("Merger", "GitHub")
    assert repo.read_file(new, "a.txt") == b"ONE\ntwo\nTHREE\n"
    assert repo.read_file(new, "b.txt") == b"new file\n"


def test_squash_makes_one_single_parent_commit(diverged: tuple[BareRepo, str, str, str]) -> None:
    repo, _, m1, f2 = diverged
    new = repo.merge(
        "refs/heads/main",
        f2,
        method="squash",
        title="Feature (#1)",
        message="",
        author=ALICE,
        committer=GITHUB,
    )
    info = repo.commit_info(new)
    assert info.parents == (m1,)
    assert info.message == "Feature (#1)"
    assert info.author_name == "Alice"
    assert repo.read_file(new, "a.txt") == b"ONE\ntwo\nTHREE\n"
    assert repo.read_file(new, "b.txt") == b"new file\n"
    assert repo.resolve("feature") == f2  # the head branch is left alone


def test_rebase_replays_each_commit(diverged: tuple[BareRepo, str, str, str]) -> None:
    repo, _, m1, f2 = diverged
    new = repo.merge(
        "main",
        f2,
        method="rebase",
        title="ignored",
        message="ignored",
        author=MERGER,
        committer=GITHUB,
    )
    top = repo.commit_info(new)
    first = repo.commit_info(top.parents[0])
    assert first.parents == (m1,)
    assert [first.message, top.message] == ["Edit line one", "Add b\n\nWith a body."]
    assert [first.author_name, top.author_name] == ["Alice", "Bob"]
    assert first.author_date == datetime(2024, 2, 1, 8, 0, tzinfo=UTC)  # kept from the original
    assert {first.committer_name, top.committer_name} == {"GitHub"}
    assert repo.read_file(first.sha, "b.txt") is None
    assert repo.read_file(new, "a.txt") == b"ONE\ntwo\nTHREE\n"
    assert repo.read_file(new, "b.txt") == b"new file\n"
    assert new != f2 and repo.resolve("main") == new


def test_rebase_of_a_branch_already_on_base_still_rewrites(repo: BareRepo) -> None:
    root = repo.resolve("main")
    assert root
    f1 = repo.write_commit(root, {"f": b"f"}, "f", ALICE)
    new = repo.merge(
        "main", f1, method="rebase", title="", message="", author=MERGER, committer=GITHUB
    )
    info = repo.commit_info(new)
    assert info.parents == (root,) and info.tree == repo.commit_info(f1).tree
    assert info.committer_name == "GitHub"


@pytest.mark.parametrize("method", ["merge", "squash", "rebase"])
def test_conflicting_merge_raises_and_moves_nothing(
    diverged: tuple[BareRepo, str, str, str], method: str
) -> None:
    repo, root, m1, _ = diverged
    clash = repo.write_commit(root, {"a.txt": b"one\ntwo\nthree!\n"}, "Clash", ALICE)
    assert not repo.mergeable(m1, clash)
    with pytest.raises(MergeConflict) as exc:
        repo.merge(
            "main",
            clash,
            method=method,  # type: ignore[arg-type]
            title="t",
            message="",
            author=MERGER,
            committer=GITHUB,
        )
    assert exc.value.paths == ("a.txt",)
    assert repo.resolve("main") == m1


def test_unrelated_histories_do_not_merge(repo: BareRepo) -> None:
    main = repo.resolve("main")
    assert main
    orphan = repo.write_commit(None, {"z": b"z"}, "orphan", ALICE)
    assert not repo.mergeable(main, orphan)
    with pytest.raises(MergeConflict):
        repo.merge(
            "main", orphan, method="merge", title="t", message="", author=ALICE, committer=ALICE
        )


def test_merge_detects_a_concurrent_move_of_the_base(
    diverged: tuple[BareRepo, str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch is advanced with its old value: a push landing mid-merge wins."""
    repo, _, m1, f2 = diverged
    pushed = repo.write_commit(m1, {"pushed": b"p"}, "concurrent push", BOB)
    real_commit_tree = repo.commit_tree

    def commit_tree_then_push(*args: object, **kwargs: object) -> str:
        sha = real_commit_tree(*args, **kwargs)  # type: ignore[arg-type]
        repo.update_ref("main", pushed, old_sha=m1)
        return sha

    monkeypatch.setattr(repo, "commit_tree", commit_tree_then_push)
    with pytest.raises(RefConflict):
        repo.merge(
            "main", f2, method="merge", title="t", message="", author=MERGER, committer=GITHUB
        )
    assert repo.resolve("main") == pushed


def test_merge_errors_name_missing_inputs(repo: BareRepo) -> None:
    with pytest.raises(ObjectNotFound):
        repo.merge(
            "nope", "main", method="merge", title="t", message="", author=ALICE, committer=ALICE
        )
    with pytest.raises(ObjectNotFound):
        repo.merge(
            "main", "d" * 40, method="merge", title="t", message="", author=ALICE, committer=ALICE
        )
