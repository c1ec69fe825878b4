"""A worker process's git object cache: each recorded commit fetched once.

A run fetches the same base commit for every workspace and every commit it
builds (nine fetches a run, each into a git directory that lives for one
activity). Here a worker process fetches a commit once into an *entry*, a
bare repository holding that commit (alone, or with its whole history), and
the throwaway git directories borrow its objects (``objects/info/alternates``)
instead of fetching again.

What keeps it safe (docs/security.md, "The worker's git object cache"):

- Entries are grouped per installation AND repository, by GitHub's numeric
  repository id (the one the token's mint answered for, see
  :class:`~app.github.auth.InstallationToken`): never by a name, which can be
  renamed and reused; a lease for another key never finds them.
- An entry is looked up by the full sha the run recorded (never a ref name)
  and holds what one ``fetch_commit`` of that sha, with the repository's own
  token, received. It is fetched into a temporary directory and renamed into
  place only after git's fetch succeeded (``index-pack`` hashed every object,
  the connectivity check found the commit's whole tree): an entry is whole
  or absent. Nothing else writes an entry: git never writes into a borrowed
  object store (new objects go to the borrowing directory), and no git
  command of ours runs in an entry but the fetch that made it.
- The cache belongs to one process and lives as long as it: its directory
  is held by a lock (``flock``) the kernel drops when the process dies,
  however it dies. Nothing on disk from an earlier process is ever trusted:
  a dead process's directory (a fetch it was killed in, a pack half written)
  is removed whole by the next process that opens a cache there, and by the
  worker's hourly sweep. What is cached is known from memory only.
- Bounded: past ``max_entries`` or ``max_bytes`` the least recently used
  entries that no activity holds are removed.
- It lives under the worker's data directory (``<data_dir>/git-cache``,
  0700), which the sandbox never shows (app/config.py ``isolation``); the
  checkout's ``.git`` the sandbox's commands get is a copy with the objects
  themselves, never an alternates file (app/workspace.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import secrets
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.github.auth import InstallationToken
from app.github.gitcmd import DEFAULT_TIME_LIMIT, FetchOutcome, fetch_commit, init_bare

_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
#: The cache's directories and its lock files: the worker's user only.
_PRIVATE = 0o700
DEFAULT_MAX_ENTRIES = 64
DEFAULT_MAX_BYTES = 2 << 30


@dataclass(frozen=True)
class CacheKey:
    """Whose objects: one installation's view of one repository (by its numeric id)."""

    installation_id: int
    repository_id: int


def cache_key_of(installation_id: int, token: InstallationToken) -> CacheKey | None:
    """The key of the one repository ``token`` was minted for (GitHub's answer
    at the mint); ``None`` (nothing cached) unless it covers exactly one."""
    if len(token.repository_ids) != 1:
        return None
    return CacheKey(installation_id, token.repository_ids[0])


@dataclass(frozen=True)
class FetchAccess:
    """How to fetch one repository: the token (sent to its remote only) and
    whose objects a fetch with it reads (``key``; ``None``: the cache may not
    serve them, every fetch goes to the remote)."""

    token: str | None
    key: CacheKey | None = None

    @classmethod
    def minted(cls, installation_id: int, token: InstallationToken) -> FetchAccess:
        """An installation token's access, keyed by the repository it was minted for."""
        return cls(token.token, cache_key_of(installation_id, token))


class ObjectFetchError(Exception):
    """The commit could not be fetched into the cache (``outcome`` says why)."""

    def __init__(self, outcome: FetchOutcome) -> None:
        super().__init__(outcome.detail or outcome.status)
        self.outcome = outcome


@dataclass
class _Entry:
    path: Path
    size: int
    leases: int = 0


@dataclass
class _Waiting:
    """The leases under way for one entry: they take turns."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    count: int = 0


_Ident = tuple[CacheKey, str, bool]


class ObjectCache:
    """One worker process's cache under ``root`` (created on first use)."""

    def __init__(
        self,
        root: Path,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.root = root
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._mine: Path | None = None
        self._lock_fd: int | None = None
        #: Least recently used first.
        self._entries: OrderedDict[_Ident, _Entry] = OrderedDict()
        self._fetching: dict[_Ident, _Waiting] = {}
        #: Fetches made into the cache (tests and the benchmark read it).
        self.fetches = 0

    @contextlib.asynccontextmanager
    async def lease(
        self,
        key: CacheKey,
        sha: str,
        *,
        remote_url: str,
        token: str | None,
        config: Sequence[tuple[str, str]] = (),
        whole: bool = False,
        time_limit: float = DEFAULT_TIME_LIMIT,
    ) -> AsyncIterator[Path]:
        """A bare repository holding ``sha`` (``whole``: with its history),
        fetched from ``remote_url`` with ``token`` unless this process already
        holds it for ``key``; kept (not evicted) until the block ends.

        Borrow it (:func:`borrow`), never write into it. Raises
        :class:`ObjectFetchError` when the fetch fails (nothing is kept).
        """
        if not _SHA.fullmatch(sha):
            raise ValueError(f"a cached commit is named by its full sha, got {sha!r}")
        ident = (key, sha, whole)
        entry = await self._take(ident, remote_url, token, config, time_limit)
        try:
            yield entry.path
        finally:
            entry.leases -= 1
            self._evict()

    async def _take(
        self,
        ident: _Ident,
        remote_url: str,
        token: str | None,
        config: Sequence[tuple[str, str]],
        time_limit: float,
    ) -> _Entry:
        """The entry for ``ident``, fetched unless held, with one lease more.

        Everyone asking for one ``ident`` at once waits on one lock, which is
        dropped only when nobody waits on it: one fetch, one entry."""
        waiting = self._fetching.get(ident)
        if waiting is None:
            waiting = self._fetching[ident] = _Waiting()
        waiting.count += 1
        try:
            async with waiting.lock:
                entry = self._entries.get(ident)
                if entry is not None and not entry.path.is_dir():
                    # Removed behind our back: fetch it again rather than hand out nothing.
                    del self._entries[ident]
                    entry = None
                if entry is None:
                    key, sha, whole = ident
                    entry = await self._fetch(
                        key, sha, remote_url, token, config, whole, time_limit
                    )
                    self._entries[ident] = entry
                entry.leases += 1
                self._entries.move_to_end(ident)
        finally:
            waiting.count -= 1
            if not waiting.count:
                del self._fetching[ident]
        self._evict()
        return entry

    async def _fetch(
        self,
        key: CacheKey,
        sha: str,
        remote_url: str,
        token: str | None,
        config: Sequence[tuple[str, str]],
        whole: bool,
        time_limit: float,
    ) -> _Entry:
        home = self._home() / f"{key.installation_id}-{key.repository_id}"
        home.mkdir(mode=_PRIVATE, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=home, prefix="fetching-"))
        try:
            init_bare(scratch)
            self.fetches += 1
            outcome = await fetch_commit(
                scratch,
                remote_url,
                sha,
                token=token,
                time_limit=time_limit,
                config=config,
                whole=whole,
            )
            if outcome.status != "fetched":
                raise ObjectFetchError(outcome)
            final = (
                home / f"{sha}-{'all' if whole else '1'}-{scratch.name.removeprefix('fetching-')}"
            )
            # Atomic: an entry is there whole, after a fetch git finished, or not at all.
            os.rename(scratch, final)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return _Entry(final, _size(final))

    def _evict(self) -> None:
        """Remove the least recently used entries nobody holds while over a bound."""
        total = sum(entry.size for entry in self._entries.values())
        for ident, entry in list(self._entries.items()):
            if len(self._entries) <= self.max_entries and total <= self.max_bytes:
                return
            if entry.leases:
                continue
            del self._entries[ident]
            total -= entry.size
            shutil.rmtree(entry.path, ignore_errors=True)

    def _home(self) -> Path:
        """This process's directory, made (and dead processes' removed) on first use."""
        if self._mine is not None:
            return self._mine
        self.root.mkdir(mode=_PRIVATE, parents=True, exist_ok=True)
        os.chmod(self.root, _PRIVATE)
        sweep_dead_caches(self.root)
        name = f"p{os.getpid()}-{secrets.token_hex(4)}"
        lock = self.root / f"{name}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mine = self.root / name
        mine.mkdir(mode=_PRIVATE)
        self._lock_fd, self._mine = fd, mine
        return mine

    def close(self) -> None:
        """Remove this process's cache (at shutdown; a killed process's goes at the next sweep)."""
        if self._mine is not None:
            shutil.rmtree(self._mine, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / f"{self._mine.name}.lock")
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._mine, self._lock_fd = None, None
        self._entries.clear()


def borrow(git_dir: Path, entry: Path) -> None:
    """Let the bare repository ``git_dir`` (ours, throwaway) read ``entry``'s
    objects, with its shallow boundary: what a fetch of the entry's commit
    would have given it, without a fetch."""
    info = git_dir / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{(entry / 'objects').resolve()}\n")
    shallow = entry / "shallow"
    if shallow.exists():
        shutil.copyfile(shallow, git_dir / "shallow")


def copy_objects(entry: Path, git_dir: Path) -> None:
    """Copy ``entry``'s objects into ``git_dir``: a self-contained copy, for
    git directories that leave the worker's hands (the sandbox's)."""
    shutil.copytree(entry / "objects", git_dir / "objects", dirs_exist_ok=True)


def sweep_dead_caches(root: Path) -> list[Path]:
    """Remove the caches under ``root`` whose process is gone (its lock is free)."""
    removed = []
    for lock in root.glob("p*.lock") if root.is_dir() else ():
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process holds it: alive
            cache = lock.with_suffix("")
            shutil.rmtree(cache, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
            removed.append(cache)
        finally:
            os.close(fd)
    return removed


def _size(path: Path) -> int:
    return sum(
        os.lstat(os.path.join(directory, name)).st_size
        for directory, _, files in os.walk(path)
        for name in files
    )
