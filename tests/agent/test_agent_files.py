"""The built-in agent's file tools stay inside the checkout and never follow
a symlink, whatever path the model (or the repository) offers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.agent.files import Checkout, FileRefused
from app.agent.tools import MalformedCall, Toolbox
from app.workspace import Workspace


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "ws" / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    secret = tmp_path / "outside.txt"
    secret.write_text("worker secret\n")
    os.symlink(secret, root / "link.txt")  # what git checks out for mode 120000
    os.symlink(tmp_path, root / "linkdir")
    return root


def test_reads_and_writes_inside(repo: Path) -> None:
    checkout = Checkout(repo)
    assert checkout.read("pkg/mod.py").startswith(b"def f")
    checkout.write("new/dir/file.txt", b"hello\n")
    assert (repo / "new" / "dir" / "file.txt").read_text() == "hello\n"
    assert list(checkout.walk()) == ["new/dir/file.txt", "pkg/mod.py"]


@pytest.mark.parametrize(
    "path",
    [
        "link.txt",
        "linkdir/outside.txt",
        "../outside.txt",
        "/etc/passwd",
        ".git/config",
        "pkg/../..",
    ],
)
def test_escapes_are_refused(repo: Path, path: str) -> None:
    checkout = Checkout(repo)
    with pytest.raises(FileRefused):
        checkout.read(path)
    with pytest.raises(FileRefused):
        checkout.write(path, b"pwned\n")
    assert (repo.parent.parent / "outside.txt").read_text() == "worker secret\n"


def test_symlinks_are_neither_listed_nor_searched(repo: Path) -> None:
    checkout = Checkout(repo)
    assert "link.txt" not in list(checkout.walk())
    with pytest.raises(FileRefused):
        list(checkout.walk("linkdir"))


async def test_tool_mistakes_are_answers_not_crashes(repo: Path) -> None:
    box = Toolbox(Workspace(repo.parent, "0" * 40), reproduction=[], tests=None, time_limit=5)
    found = await box.run("search", {"pattern": "secret"})
    assert found.output == "no matches"  # the symlinked file is not searched
    refused = await box.run("read_file", {"path": "link.txt"})
    assert not refused.ok and "symlinks are not followed" in refused.output
    twice = await box.run(
        "replace_in_file", {"path": "pkg/mod.py", "old_text": "", "new_text": "x"}
    )
    assert not twice.ok and "exactly once" in twice.output
    edited = await box.run(
        "replace_in_file", {"path": "pkg/mod.py", "old_text": "return 1", "new_text": "return 2"}
    )
    assert edited.ok and "return 2" in (repo / "pkg" / "mod.py").read_text()
    with pytest.raises(MalformedCall, match="no tool named"):
        await box.run("rm_rf", {})
    with pytest.raises(MalformedCall, match="not a JSON object"):
        await box.run("read_file", None)
    with pytest.raises(MalformedCall, match="mistyped"):
        await box.run("read_file", {"path": "pkg/mod.py", "start_line": "one"})
    assert (await box.run("run_tests", {})).ok is False
