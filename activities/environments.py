"""Dependencies installed once: the environment the base's ``setup`` builds.

Every repository command sees ``$REPAIRBOT_ENV``, a directory outside the
checkout for setup to install into (``python -m venv "$REPAIRBOT_ENV"``, a
package cache, ``pip install --target``).

By default (``setup_once``, on unless the repository turns it off) the base
commit's setup builds it once, with the network it may have, in a cache on
the worker keyed by what decides what it installs: the repository, the setup
commands and the dependency files' contents (not the
commit: a later run whose dependency files are the same reuses it too).
Later steps whose key matches skip setup:

- a setup that installed only into ``$REPAIRBOT_ENV`` is shared read-only:
  the candidate's code cannot change what the next candidate runs with;
- a setup that also wrote into the checkout (``pip install -e .``, a
  ``.venv`` in the repository) has those paths saved with the entry; each
  later checkout gets its own copy, with the base checkout's absolute path
  rewritten to its own (:mod:`activities.setup_effects`); when the
  environment itself names the checkout, it is copied and rewritten too.
  An entry that cannot be carried (a binary naming the checkout, the
  project installed by copy, a tracked file changed) is never reused by
  another checkout: setup runs again there, as without the cache.

Only a workspace without a candidate patch (the base) fills the cache:
candidate code, which the model wrote, never writes what another step
trusts. A candidate whose patch changes a dependency file misses the cache;
its setup then runs again, without network, in a private copy of the base's
environment (whatever it needs beyond what the base installed is reported as
a setup failure with the patch applied). A missing entry (another worker, a
restart) just means setup runs again; nothing depends on the cache surviving.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from activities import setup_effects
from app.checkout import UnsafePath, read_in_checkout
from app.contracts.step_environment import Environment
from app.repo_config import Command
from app.workspace import Workspace, file_at

ENV_VAR = "REPAIRBOT_ENV"
Listing = dict[str, tuple[int, int, float]]
#: Files whose content decides what setup installs (top level of the checkout).
DEPENDENCY_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "constraints.txt",
    "Pipfile.lock",
    "poetry.lock",
    "pdm.lock",
    "uv.lock",
    "tox.ini",
    "package-lock.json",
    "package.json",
)
_MAX_DEPENDENCY_FILE = 4 * 1024 * 1024
#: Entries unused for this long are removed when a new one is built.
MAX_AGE_SECONDS = 3 * 24 * 3600


#: Raised when the entries' layout changes, so older entries are never read.
_LAYOUT = 2


def environment_key(repo: str, setup: Sequence[Command], dependencies: Mapping[str, bytes]) -> str:
    """The cache key: what setup installs is decided by these, not by the commit.

    Not the network either: only the base builds entries, with the network
    the repository gives its setup; candidates (never networked) reuse them.
    """
    digest = hashlib.sha256()
    recipe = {
        "layout": _LAYOUT,
        "repo": repo,
        "setup": [c.model_dump(mode="json") for c in setup],
    }
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    for name in DEPENDENCY_FILES:
        data = dependencies.get(name)
        if data is not None:
            digest.update(f"\0{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()[:32]


def dependency_files(checkout: Path) -> dict[str, bytes]:
    """The dependency files in a checkout (a symlink is keyed apart, never followed)."""
    found = {}
    for name in DEPENDENCY_FILES:
        try:
            found[name] = read_in_checkout(checkout, name, limit=_MAX_DEPENDENCY_FILE)
        except FileNotFoundError:
            continue
        except (UnsafePath, OSError):
            found[name] = b"<unreadable>"
    return found


async def dependency_files_at(ws: Workspace, commit: str) -> dict[str, bytes]:
    """The dependency files as ``commit`` has them (the base, under a candidate's patch)."""
    found = {}
    for name in DEPENDENCY_FILES:
        data = await file_at(ws, commit, name, limit=_MAX_DEPENDENCY_FILE)
        if data is not None:
            found[name] = data
    return found


@dataclass(frozen=True)
class Entry:
    """How a cache entry was built, to carry it to another checkout."""

    #: The base checkout and ``$REPAIRBOT_ENV`` paths the setup ran with.
    checkout: str
    env: str
    #: Paths setup created in the checkout (saved beside the entry).
    created: list[str]
    #: Files naming the old paths: in the environment, in the saved paths.
    env_references: list[str]
    checkout_references: list[str]
    #: Why no other checkout may use it, if so.
    unmovable: str | None = None

    @property
    def bound(self) -> bool:
        """Setup wrote into the checkout or named it: a later step needs copies."""
        return bool(self.created or self.env_references)


class EnvironmentCache:
    """Environments built by the base's setup, one directory per key, on this worker."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ready(self, key: str) -> Path | None:
        path = self.root / key
        return path if (self.root / f"{key}.ready").is_file() and path.is_dir() else None

    def saved_checkout(self, key: str) -> Path:
        """Where the paths setup created in the base's checkout are kept."""
        return self.root / f"{key}.checkout"

    def entry(self, key: str) -> Entry | None:
        """How ``key`` was built; None for an entry without the record (unusable)."""
        try:
            data = json.loads((self.root / f"{key}.json").read_text())
            return Entry(**data)
        except (OSError, ValueError, TypeError):
            return None

    def record(self, key: str, entry: Entry) -> None:
        (self.root / f"{key}.json").write_text(json.dumps(dataclasses.asdict(entry)))

    @contextlib.contextmanager
    def building(self, key: str) -> Iterator[Path | None]:
        """The directory to build ``key`` in, exclusively; None when another
        attempt is building it right now (the caller uses a private one).
        Call :meth:`mark_ready` once setup passed; otherwise it is removed."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    yield None
                    return
                raise
            path = self.root / key
            self._remove(key)  # a half-built one from a crash
            path.mkdir()
            try:
                yield path
            finally:
                if not (self.root / f"{key}.ready").is_file():
                    self._remove(key)
        finally:
            os.close(lock)

    def mark_ready(self, key: str) -> None:
        (self.root / f"{key}.ready").touch()
        self._evict_old(keep=key)

    def _evict_old(self, *, keep: str) -> None:
        horizon = time.time() - MAX_AGE_SECONDS
        for marker in self.root.glob("*.ready"):
            key = marker.name.removesuffix(".ready")
            with contextlib.suppress(OSError):
                if key != keep and marker.stat().st_mtime < horizon:
                    marker.unlink()
                    self._remove(key)

    def _remove(self, key: str) -> None:
        shutil.rmtree(self.root / key, ignore_errors=True)
        shutil.rmtree(self.saved_checkout(key), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{key}.json").unlink()

    def touch(self, key: str) -> None:
        with contextlib.suppress(OSError):
            (self.root / f"{key}.ready").touch()


def capture(
    cache: EnvironmentCache, key: str, checkout: Path, env: Path, before: Listing | None
) -> Entry:
    """After the base's setup passed: what it did to the checkout, kept with the entry."""
    old = [str(checkout).encode(), os.path.realpath(checkout).encode()]
    if before is None:
        return Entry(str(checkout), str(env), [], [], [], unmovable="too many files to compare")
    try:
        done = setup_effects.effects(before, checkout)
    except setup_effects.TooManyEntries:
        return Entry(str(checkout), str(env), [], [], [], unmovable="too many files to compare")
    saved = cache.saved_checkout(key)
    setup_effects.save(checkout, done.created, saved)
    in_env = setup_effects.references(env, old, project=old[-1])
    in_checkout = setup_effects.references(saved, [*old, str(env).encode()], project=old[-1])
    unmovable = in_env.blocked or in_checkout.blocked
    if done.changed:
        unmovable = f"setup changed tracked files ({', '.join(done.changed[:3])})"
    return Entry(
        checkout=str(checkout),
        env=str(env),
        created=done.created,
        env_references=in_env.text,
        checkout_references=in_checkout.text,
        unmovable=unmovable,
    )


def carry(
    cache: EnvironmentCache, key: str, entry: Entry, ws: Workspace, *, writable: bool = False
) -> Environment:
    """The entry made usable in ``ws``: its saved paths copied into the checkout
    and, when the environment names the old checkout (or ``writable``: setup
    runs again in it), a private, rewritten copy of the environment."""
    shared = cache.root / key
    copy = writable or bool(entry.env_references)
    env_path = ws.root / "env" if copy else shared
    if copy:
        shutil.rmtree(env_path, ignore_errors=True)
        shutil.copytree(shared, env_path, symlinks=True)
    replacements = [(old.encode(), str(ws.repo).encode()) for old in _spellings(entry.checkout)]
    replacements += [(old.encode(), str(env_path).encode()) for old in _spellings(entry.env)]
    copied = setup_effects.apply(cache.saved_checkout(key), entry.created, ws.repo)
    setup_effects.rewrite(env_path, entry.env_references, replacements)
    in_copied = [
        f for f in entry.checkout_references if any(f == c or f.startswith(c + "/") for c in copied)
    ]
    setup_effects.rewrite(ws.repo, in_copied, replacements)
    return Environment(path=env_path, reused=not writable, shared=not copy)


def _spellings(path: str) -> list[str]:
    """A path as written and resolved, longest first (so neither rewrite splits the other)."""
    return sorted({path, os.path.realpath(path)}, key=len, reverse=True)
