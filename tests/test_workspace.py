"""Workspaces rebuilt from recorded inputs, with real git over file:// URLs."""

from __future__ import annotations

import os
import stat
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from app.github.gitcmd import remote_auth
from app.github.objcache import CacheKey, ObjectCache
from app.workspace import (
    CheckoutRefused,
    CommitNotFound,
    DiffTooLarge,
    FetchFailed,
    Limits,
    NestedGitRefused,
    PatchRejected,
    QuotaExceeded,
    Workspace,
    build_workspace,
    diff_against_base,
    diff_from,
    remove_workspace,
    snapshot,
    sweep_workspaces,
    workspace_git_env,
    workspace_usage,
)
from tests.agent.sample_repo import (  # noqa: F401
    FIX_DIFF,
    SampleRepo,
    git,
    sample_repo_fixture,
    sample_repo_template_fixture,
)

#: Protocol v0 refuses a fetch of an unadvertised commit, as some servers do.
OLD_PROTOCOL = [("protocol.version", "0")]


async def build(
    tmp_path: Path, repo: SampleRepo, patch: str | None = None, **kwargs: object
) -> Workspace:
    params: dict[str, object] = {
        "clone_url": repo.url,
        "base_sha": repo.base_sha,
        "patch": patch,
    }
    params.update(kwargs)
    return await build_workspace(tmp_path / "workspaces", **params)  # type: ignore[arg-type]


async def test_workspace_is_a_detached_checkout_of_the_base(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    later = sample_repo.commit({"calc.py": "moved on\n"}, "later work")
    ws = await build(tmp_path, sample_repo)
    assert git(ws.repo, "rev-parse", "HEAD") == sample_repo.base_sha != later
    assert "return a - b" in (ws.repo / "calc.py").read_text()
    assert git(ws.repo, "status", "--porcelain") == ""
    assert all(d.is_dir() for d in (ws.home, ws.tmp, ws.scratch))
    assert ws.repo.parent == ws.home.parent == ws.root
    remove_workspace(ws)
    assert not ws.root.exists()
    remove_workspace(ws)  # already gone: fine


async def test_every_build_gets_a_new_directory(tmp_path: Path, sample_repo: SampleRepo) -> None:
    first = await build(tmp_path, sample_repo)
    second = await build(tmp_path, sample_repo)
    assert first.root != second.root and first.root.parent == second.root.parent


async def test_patch_is_applied_and_staged(tmp_path: Path, sample_repo: SampleRepo) -> None:
    ws = await build(tmp_path, sample_repo, FIX_DIFF)
    assert "return a + b" in (ws.repo / "calc.py").read_text()
    assert git(ws.repo, "diff", "--cached", "--name-only") == "calc.py"


async def test_a_diff_rebuilds_exactly_including_binary_and_non_utf8(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo, FIX_DIFF)
    (ws.repo / "logo.bin").write_bytes(bytes(range(256)) * 4)
    (ws.repo / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    (ws.repo / "README.md").unlink()
    (ws.repo / "__pycache__").mkdir()
    (ws.repo / "__pycache__" / "calc.cpython-311.pyc").write_bytes(b"\x00junk")
    patch = await diff_against_base(ws)
    assert "GIT binary patch" in patch and "__pycache__" not in patch
    again = await build(tmp_path, sample_repo, patch)
    for name in ("calc.py", "logo.bin", "latin1.txt"):
        assert (again.repo / name).read_bytes() == (ws.repo / name).read_bytes()
    assert not (again.repo / "README.md").exists()
    assert await diff_against_base(again) == patch


async def test_diff_from_a_snapshot_leaves_out_what_setup_made(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo)
    (ws.repo / "build").mkdir()
    (ws.repo / "build" / "out.txt").write_text("setup output\n")
    baseline = await snapshot(ws)
    (ws.repo / "calc.py").write_text((ws.repo / "calc.py").read_text().replace("a - b", "a + b"))
    patch = await diff_from(ws, baseline)
    assert "calc.py" in patch and "build/out.txt" not in patch
    assert "build/out.txt" in await diff_against_base(ws)


async def test_empty_diff_when_nothing_changed(tmp_path: Path, sample_repo: SampleRepo) -> None:
    assert await diff_against_base(await build(tmp_path, sample_repo)) == ""


async def test_falls_back_to_fetching_branches_when_the_server_refuses_a_commit_id(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    sample_repo.commit({"other.txt": "x\n"}, "tip moves on")
    ws = await build(tmp_path, sample_repo, git_config=OLD_PROTOCOL)
    assert git(ws.repo, "rev-parse", "HEAD") == sample_repo.base_sha


async def test_unknown_commit_and_unreachable_remote(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    with pytest.raises(CommitNotFound):
        await build(tmp_path, sample_repo, base_sha="1" * 40, git_config=OLD_PROTOCOL)
    with pytest.raises(FetchFailed):
        await build(tmp_path, sample_repo, clone_url=(tmp_path / "nowhere").as_uri())
    assert list((tmp_path / "workspaces").iterdir()) == []  # half-built ones are removed


async def test_a_patch_that_does_not_apply_is_rejected_and_cleaned_up(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    with pytest.raises(PatchRejected, match=r"calc\.py"):
        await build(tmp_path, sample_repo, FIX_DIFF.replace("a - b", "a / b"))
    assert list((tmp_path / "workspaces").iterdir()) == []


async def test_base_sha_must_be_a_full_commit_id(tmp_path: Path, sample_repo: SampleRepo) -> None:
    with pytest.raises(ValueError, match="full commit id"):
        await build(tmp_path, sample_repo, base_sha="main")


async def test_read_only_leftovers_do_not_stop_removal(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo)
    locked = ws.repo / "locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    remove_workspace(ws)
    assert not ws.root.exists()


def _git_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str) -> None:
    """``git`` on PATH runs the shell lines ``before``, then the real git."""
    real_git = subprocess.run(
        ["sh", "-c", "command -v git"], capture_output=True, text=True
    ).stdout.strip()
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    (shim_dir / "git").write_text(f'#!/bin/sh\n{before}exec {real_git} "$@"\n')
    (shim_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")


async def test_a_fetch_keeps_one_pack_and_starts_no_maintenance(
    tmp_path: Path, sample_repo: SampleRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The git directory lives for one activity: its objects arrive as one pack
    (the copy for commands and the removal walk two files, not a file and a
    directory per object) and no ``git maintenance`` runs after the fetch."""
    trace = tmp_path / "trace2.log"
    _git_shim(tmp_path, monkeypatch, f"export GIT_TRACE2={trace}\n")
    ws = await build(tmp_path, sample_repo)

    started = [line for line in trace.read_text().splitlines() if "child_start" in line]
    assert any("index-pack" in line for line in started), started
    assert not any("maintenance" in line for line in started), started
    for git_dir in (ws.git_dir, ws.repo / ".git"):
        objects = git_dir / "objects"
        assert sorted(p.name for p in objects.iterdir()) == ["info", "pack"]
        assert len(list((objects / "pack").glob("*.pack"))) == 1


async def test_the_token_travels_in_the_environment_never_argv(
    tmp_path: Path, sample_repo: SampleRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A git shim on PATH records each invocation's argv and its GIT_CONFIG_*
    # environment, then runs the real git.
    log = tmp_path / "git-calls.log"
    _git_shim(
        tmp_path,
        monkeypatch,
        f'echo "argv: $*" >> {log}\n'
        f"env | grep -E '^(GIT_CONFIG_|GIT_TERMINAL_PROMPT)' | sed 's/^/env: /' >> {log}\n",
    )
    token = "ghs_secretinstallationtoken"
    auth = remote_auth(sample_repo.url, token)
    ws = await build(tmp_path, sample_repo, token=token)
    calls = log.read_text()
    argv_lines = [line for line in calls.splitlines() if line.startswith("argv:")]
    for secret in auth.secrets:
        assert not any(secret in line for line in argv_lines)
        for config in (ws.git_dir / "config", ws.repo / ".git" / "config"):
            assert secret not in config.read_text()
    env_lines = set(calls.splitlines())
    # Scoped to the remote, never a bare http.extraHeader; no helpers, no redirects.
    assert f"env: GIT_CONFIG_KEY_2=http.{sample_repo.url}.extraHeader" in env_lines
    assert "env: GIT_CONFIG_VALUE_2=Authorization: Basic " + auth.secrets[1] in env_lines
    assert "env: GIT_CONFIG_KEY_0=credential.helper" in env_lines
    assert "env: GIT_CONFIG_KEY_1=http.followRedirects" in env_lines
    assert "env: GIT_CONFIG_VALUE_1=false" in env_lines
    assert not any(line.endswith("=http.extraHeader") for line in env_lines)
    assert "env: GIT_TERMINAL_PROMPT=0" in env_lines


async def test_a_failed_fetch_does_not_echo_the_token(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    token = "ghs_secretinstallationtoken"
    with pytest.raises(FetchFailed) as caught:
        await build(tmp_path, sample_repo, clone_url="http://127.0.0.1:9/repo.git", token=token)
    for secret in remote_auth("", token).secrets:
        assert secret not in str(caught.value)


async def test_commands_cannot_make_the_worker_run_programs_through_git(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    """Repository code owns repo/.git; the worker's git never reads it."""
    ws = await build(tmp_path, sample_repo)
    planted = tmp_path / "planted-ran"
    hook = f"#!/bin/sh\necho ran > {planted}\n"
    theirs = ws.repo / ".git"
    (theirs / "hook.sh").write_text(hook)
    (theirs / "hook.sh").chmod(0o755)
    with (theirs / "config").open("a") as fh:
        fh.write(
            f"[core]\n\tfsmonitor = {theirs / 'hook.sh'}\n\tworktree = /etc\n"
            f'[filter "x"]\n\tclean = {theirs / "hook.sh"}\n'
            f'[diff "x"]\n\ttextconv = {theirs / "hook.sh"}\n'
        )
    (ws.repo / ".gitattributes").write_text("* filter=x diff=x\n")
    (ws.repo / "calc.py").write_text("changed\n")
    patch = await diff_against_base(ws)
    assert not planted.exists()
    assert "+changed" in patch and "passwd" not in patch  # not /etc's files either
    # Even a .git replaced wholesale changes nothing for the worker.
    remove_workspace_git = theirs.rename(ws.repo / "old-git")
    assert remove_workspace_git.exists()
    assert "+changed" in await diff_against_base(ws)
    assert not planted.exists()


async def test_sweeping_removes_only_stale_workspaces(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    stale = await build(tmp_path, sample_repo)
    live = await build(tmp_path, sample_repo)
    os.utime(stale.root, (0, 0))
    assert sweep_workspaces(tmp_path / "workspaces", older_than=3600) == [stale.root]
    assert not stale.root.exists() and live.repo.is_dir()
    assert sweep_workspaces(tmp_path / "nowhere", older_than=0) == []


# -- hostile trees and work trees (issue 19, items 3 and 8) ------------------------


def _plumb(repo: Path, *args: str, stdin: str | bytes | None = None) -> str:
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_DIR": str(repo),
        "GIT_AUTHOR_NAME": "Bomber",
        "GIT_AUTHOR_EMAIL": "bomber@example.com",
        "GIT_COMMITTER_NAME": "Bomber",
        "GIT_COMMITTER_EMAIL": "bomber@example.com",
    }
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = subprocess.run(["git", *args], env=env, input=data, check=True, capture_output=True)
    return out.stdout.decode().strip()


def hostile_repo(
    tmp_path: Path, entries: list[tuple[str, str, str]], depth: int = 0
) -> tuple[str, str]:
    """A bare repository whose one commit's root tree is ``entries`` (mode,
    name, "blob:<content>" or "tree"), with ``depth`` levels of a tree that
    names the one below it ten times: a git bomb when deep. (url, commit)."""
    repo = tmp_path / "hostile.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(repo)], check=True)
    blob = _plumb(repo, "hash-object", "-w", "--stdin", stdin="boom\n")
    tree = _plumb(repo, "mktree", stdin="".join(f"100644 blob {blob}\tf{i}\n" for i in range(10)))
    for _ in range(depth):
        tree = _plumb(
            repo, "mktree", stdin="".join(f"040000 tree {tree}\td{i}\n" for i in range(10))
        )
    lines = []
    for mode, name, what in entries:
        if what == "tree":
            lines.append(f"040000 tree {tree}\t{name}\n")
        else:
            sha = _plumb(repo, "hash-object", "-w", "--stdin", stdin=what.removeprefix("blob:"))
            lines.append(f"{mode} blob {sha}\t{name}\n")
    root = _plumb(repo, "mktree", "--missing", stdin="".join(lines))
    commit = _plumb(repo, "commit-tree", root, "-m", "hostile")
    _plumb(repo, "update-ref", "refs/heads/main", commit)
    return repo.as_uri(), commit


async def test_a_git_bomb_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # 10^5 files from a few hundred bytes of objects; the cap is 1,000.
    url, commit = hostile_repo(tmp_path, [("040000", "bomb", "tree")], depth=4)
    root = tmp_path / "workspaces"
    with pytest.raises(CheckoutRefused, match="more than 1000 files"):
        await build_workspace(
            root, clone_url=url, base_sha=commit, patch=None, limits=Limits(checkout_files=1000)
        )
    assert list(root.iterdir()) == []  # nothing left, nothing was checked out


async def test_a_tree_over_the_byte_cap_is_refused(tmp_path: Path) -> None:
    url, commit = hostile_repo(tmp_path, [("100644", "big.txt", "blob:" + "x" * 5000)])
    with pytest.raises(CheckoutRefused, match="more than 4000 bytes"):
        await build_workspace(
            tmp_path / "ws",
            clone_url=url,
            base_sha=commit,
            patch=None,
            limits=Limits(checkout_bytes=4000),
        )


@pytest.mark.parametrize("name", [".git", ".GIT"])
async def test_a_tree_with_a_git_directory_is_refused(tmp_path: Path, name: str) -> None:
    url, commit = hostile_repo(tmp_path, [("040000", name, "tree")])
    with pytest.raises(CheckoutRefused, match=r"holds a \.git path"):
        await build_workspace(tmp_path / "ws", clone_url=url, base_sha=commit, patch=None)


async def test_a_planted_gitfile_is_never_followed(tmp_path: Path, sample_repo: SampleRepo) -> None:
    ws = await build(tmp_path, sample_repo)
    other = tmp_path / "someone-elses-repo"
    subprocess.run(["git", "init", "--quiet", str(other)], check=True)
    before = sorted(p.name for p in (other / ".git").iterdir())
    (ws.repo / "vendor").mkdir()
    (ws.repo / "vendor" / ".git").write_text(f"gitdir: {other / '.git'}\n")
    with pytest.raises(NestedGitRefused, match=r"vendor/\.git"):
        await diff_against_base(ws)
    with pytest.raises(NestedGitRefused):
        await snapshot(ws)
    assert sorted(p.name for p in (other / ".git").iterdir()) == before  # no index written there


async def test_a_nested_git_directory_is_refused(tmp_path: Path, sample_repo: SampleRepo) -> None:
    ws = await build(tmp_path, sample_repo)
    subprocess.run(["git", "init", "--quiet", str(ws.repo / "inner")], check=True)
    with pytest.raises(NestedGitRefused, match=r"inner/\.git"):
        await diff_against_base(ws)


async def test_the_worker_git_never_discovers_a_repository_above_the_workspace(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo)
    env = workspace_git_env(ws)
    assert env["GIT_CEILING_DIRECTORIES"] == str(ws.root.parent)
    assert env["GIT_DIR"] == str(ws.git_dir) and env["GIT_WORK_TREE"] == str(ws.repo)


async def test_a_huge_diff_is_refused_and_never_held_whole(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo)
    # Random bytes: a binary diff (base85) about 1.25x the file.
    (ws.repo / "huge.bin").write_bytes(os.urandom(8 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DiffTooLarge, match="larger than 1048576 bytes"):
            await diff_from(ws, ws.base_sha, limit=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # At most the cap and one chunk, not the ~10 MiB diff (nor 4 copies of it).
    assert peak < 3 << 20, peak


async def test_a_workspace_over_its_quota_is_noticed(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    ws = await build(tmp_path, sample_repo)
    used = workspace_usage(ws, limit=1 << 30)
    (ws.repo / "fill.bin").write_bytes(os.urandom(2 << 20))
    with pytest.raises(QuotaExceeded):
        workspace_usage(ws, limit=used + (1 << 20))


async def test_a_workspace_borrows_the_cached_base_and_gives_commands_a_self_contained_copy(
    tmp_path: Path, sample_repo: SampleRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built from a cache entry, no git fetch runs; our ``git/`` borrows the
    entry's objects, and ``repo/.git`` (what the sandbox's commands see) holds
    copies of them and no alternates file: it works with the cache gone."""
    trace = tmp_path / "trace2.log"
    _git_shim(tmp_path, monkeypatch, f"export GIT_TRACE2={trace}\n")
    cache = ObjectCache(tmp_path / "git-cache")
    async with cache.lease(
        CacheKey(1, 100), sample_repo.base_sha, remote_url=sample_repo.url, token=None
    ) as entry:
        fetches_before = trace.read_text().count("cmd_name fetch")
        assert fetches_before == 1  # the cache's own
        ws = await build(tmp_path, sample_repo, patch=FIX_DIFF, objects=entry)
    assert cache.fetches == 1
    assert trace.read_text().count("cmd_name fetch") == 1  # none for the workspace
    assert (ws.git_dir / "objects" / "info" / "alternates").exists()
    theirs = ws.repo / ".git"
    assert not (theirs / "objects" / "info" / "alternates").exists()
    cache.close()
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(ws.home)}
    checked = subprocess.run(
        ["git", "-c", "safe.directory=*", "fsck", "--connectivity-only", "--no-dangling"],
        cwd=ws.repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    status = subprocess.run(
        ["git", "-c", "safe.directory=*", "status", "--porcelain"],
        cwd=ws.repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0 and status.stdout == "M  calc.py\n", status
    remove_workspace(ws)
