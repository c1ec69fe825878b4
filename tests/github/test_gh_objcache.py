"""The worker's git object cache, with real git over file:// URLs."""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.github.auth import InstallationToken
from app.github.gitcmd import git_env, init_bare, run_git
from app.github.objcache import CacheKey, ObjectCache, ObjectFetchError, borrow, cache_key_of
from tests.agent.sample_repo import (  # noqa: F401
    SampleRepo,
    sample_repo_fixture,
    sample_repo_template_fixture,
)

KEY = CacheKey(installation_id=1, repository_id=100)


def _cache(tmp_path: Path, **limits: int) -> ObjectCache:
    return ObjectCache(tmp_path / "git-cache", **limits)


async def _lease_once(cache: ObjectCache, repo: SampleRepo, sha: str, key: CacheKey = KEY) -> Path:
    async with cache.lease(key, sha, remote_url=repo.url, token=None) as entry:
        return entry


async def test_a_commit_is_fetched_once_per_installation_and_repository(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    first = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    again = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    assert cache.fetches == 1 and again == first
    # The same commit for another repository id, or another installation, is
    # never served from this one's objects: fetched again, kept apart.
    other_repo = await _lease_once(cache, sample_repo, sample_repo.base_sha, CacheKey(1, 101))
    other_installation = await _lease_once(
        cache, sample_repo, sample_repo.base_sha, CacheKey(2, 100)
    )
    assert cache.fetches == 3
    assert len({first.parent, other_repo.parent, other_installation.parent}) == 3


async def test_a_bare_repository_borrows_the_commit_without_a_fetch(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    bare = tmp_path / "bare"
    init_bare(bare)
    async with cache.lease(
        KEY, sample_repo.base_sha, remote_url=sample_repo.url, token=None
    ) as entry:
        borrow(bare, entry)
        env = git_env(extra={"GIT_DIR": str(bare)})
        tree = await run_git(["rev-parse", f"{sample_repo.base_sha}^{{tree}}"], cwd=bare, env=env)
        assert tree.ok, tree.stderr
        # A write lands in the borrower, never in the entry.
        before = sorted(p.relative_to(entry) for p in entry.rglob("*"))
        wrote = await run_git(
            ["hash-object", "-w", "--stdin"], cwd=bare, env=env, input=b"new object\n"
        )
        assert wrote.ok
        assert sorted(p.relative_to(entry) for p in entry.rglob("*")) == before


async def test_a_commit_is_named_by_its_full_sha_never_a_ref(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    for name in ("main", "HEAD", sample_repo.base_sha[:12]):
        with pytest.raises(ValueError, match="full sha"):
            await _lease_once(cache, sample_repo, name)
    assert cache.fetches == 0


async def test_a_failed_fetch_keeps_nothing(tmp_path: Path, sample_repo: SampleRepo) -> None:
    cache = _cache(tmp_path)
    missing = "0" * 40
    for _ in range(2):
        with pytest.raises(ObjectFetchError) as caught:
            await _lease_once(cache, sample_repo, missing)
        assert caught.value.outcome.status == "missing"
    # Asked again, fetched again: a failure is never remembered as an entry.
    assert cache.fetches == 2
    home = next((tmp_path / "git-cache").glob("p*/1-100"))
    assert list(home.iterdir()) == []


async def test_a_fetch_cancelled_midway_keeps_nothing(
    tmp_path: Path, sample_repo: SampleRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a fetch interrupted at any point leaves is removed; the next lease
    fetches again (a killed process's half-written fetch: see the sweep test)."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    shim = tmp_path / "shim"
    shim.mkdir()
    real_git = "/usr/bin/git" if Path("/usr/bin/git").exists() else "git"
    # The fetch blocks on the fifo once it has started writing into the cache.
    (shim / "git").write_text(
        f'#!/bin/sh\nif [ "$1" = fetch ]; then touch "$GIT_DIR/started"; cat {gate}; fi\n'
        f'exec {real_git} "$@"\n'
    )
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    spawned: list[asyncio.subprocess.Process] = []
    spawn = asyncio.create_subprocess_exec

    async def spawn_and_record(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        spawned.append(await spawn(*args, **kwargs))
        return spawned[-1]

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_and_record)
    cache = _cache(tmp_path)
    lease = asyncio.ensure_future(_lease_once(cache, sample_repo, sample_repo.base_sha))
    deadline = asyncio.get_running_loop().time() + 60
    while not (list((tmp_path / "git-cache").glob("p*/1-100/fetching-*/started")) and spawned):
        # Waits on recorded state: git runs, and the lease waits for it (a
        # cancel while the process is being spawned is another story).
        assert not lease.done(), lease
        assert asyncio.get_running_loop().time() < deadline, "the fetch never started"
        await asyncio.sleep(0.01)
    lease.cancel()
    with pytest.raises(asyncio.CancelledError):
        await lease
    home = next((tmp_path / "git-cache").glob("p*/1-100"))
    assert list(home.iterdir()) == []
    monkeypatch.undo()
    await _lease_once(cache, sample_repo, sample_repo.base_sha)
    assert cache.fetches == 2


async def test_concurrent_leases_of_one_commit_fetch_it_once(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    entries = await asyncio.gather(
        *(_lease_once(cache, sample_repo, sample_repo.base_sha) for _ in range(4))
    )
    assert cache.fetches == 1 and len(set(entries)) == 1


async def test_an_entry_removed_from_disk_is_fetched_again(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    first = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    for path in sorted(first.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    first.rmdir()
    again = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    assert cache.fetches == 2 and again.is_dir()


async def test_the_cache_is_bounded_and_keeps_what_is_held(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    later = sample_repo.commit({"calc.py": "later\n"}, "later")
    latest = sample_repo.commit({"calc.py": "latest\n"}, "latest")
    cache = _cache(tmp_path, max_entries=1)
    old = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    async with cache.lease(KEY, later, remote_url=sample_repo.url, token=None) as held:
        assert not old.exists()  # least recently used, held by nobody: gone
        # Over the bound while ``held`` is in use: the newer entry is the one to go.
        newest = await _lease_once(cache, sample_repo, latest)
        assert held.is_dir() and not newest.exists()
    assert held.is_dir()  # one entry, the bound
    byte_bound = _cache(tmp_path / "bytes", max_bytes=1)
    entry = await _lease_once(byte_bound, sample_repo, sample_repo.base_sha)
    assert not entry.exists()


async def test_the_cache_is_private_to_the_worker_user(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    cache = _cache(tmp_path)
    entry = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    for directory in (cache.root, entry.parent.parent, entry.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


async def test_a_dead_workers_cache_is_removed_never_trusted(
    tmp_path: Path, sample_repo: SampleRepo
) -> None:
    """A worker killed mid-fetch leaves its directory behind: the next cache
    opened there removes it (its lock is free) and fetches for itself, while
    a live worker's (its lock held) is left alone."""
    root = tmp_path / "git-cache"
    root.mkdir()
    dead = root / "p1-dead"
    planted = dead / "1-100" / f"{sample_repo.base_sha}-1-x"
    planted.mkdir(parents=True)
    (planted / "HEAD").write_text("half written\n")
    (root / "p1-dead.lock").write_text("")
    alive = root / "p2-alive"
    alive.mkdir()
    fd = os.open(root / "p2-alive.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        cache = ObjectCache(root)
        entry = await _lease_once(cache, sample_repo, sample_repo.base_sha)
        assert cache.fetches == 1 and not entry.is_relative_to(dead)
        assert not dead.exists() and not (root / "p1-dead.lock").exists()
        assert alive.is_dir()
    finally:
        os.close(fd)


async def test_closing_removes_the_cache(tmp_path: Path, sample_repo: SampleRepo) -> None:
    cache = _cache(tmp_path)
    entry = await _lease_once(cache, sample_repo, sample_repo.base_sha)
    cache.close()
    assert not entry.exists() and list(cache.root.iterdir()) == []


def test_a_token_names_the_cache_key_only_for_exactly_one_repository() -> None:
    later = datetime(2100, 1, 1, tzinfo=UTC)
    assert cache_key_of(3, InstallationToken("t", later, repository_ids=(7,))) == CacheKey(3, 7)
    # The installation's own token, or one for several repositories: whose
    # objects a fetch reads is not known, so nothing is cached.
    assert cache_key_of(3, InstallationToken("t", later)) is None
    assert cache_key_of(3, InstallationToken("t", later, repository_ids=(7, 8))) is None
