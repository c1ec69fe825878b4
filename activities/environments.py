"""Dependencies installed once per run: the environment ``setup`` builds.

Every repository command sees ``$REPAIRBOT_ENV``, a directory outside the
checkout for setup to install into (``python -m venv "$REPAIRBOT_ENV"``, a
package cache, ``pip install --target``). By default it is private to the
workspace and setup runs before every step, as before.

With ``setup_once: true`` in the repository's config, the base commit's setup
builds it once, in a cache on the worker keyed by everything it was built
from (repository, base commit, the setup commands and their network, the
dependency files in the tree). Later steps whose key matches skip setup and
see that directory read-only: the candidate's code cannot change what the
next candidate runs with, and needs no network. Only a workspace without a
candidate patch (the base) may fill the cache: candidate code, which the
model wrote, never writes what another step trusts. A missing entry (another
worker, a restart, a candidate that changed a dependency file) just means
setup runs again, as recorded; nothing depends on the cache surviving.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.checkout import UnsafePath, read_in_checkout
from app.repo_config import Command

ENV_VAR = "REPAIRBOT_ENV"
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


def environment_key(
    repo: str, base_sha: str, setup: Sequence[Command], network: bool, checkout: Path
) -> str:
    digest = hashlib.sha256()
    recipe = {
        "repo": repo,
        "base": base_sha,
        "setup": [c.model_dump(mode="json") for c in setup],
        "network": network,
    }
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    for name in DEPENDENCY_FILES:
        try:
            data = read_in_checkout(checkout, name, limit=_MAX_DEPENDENCY_FILE)
        except FileNotFoundError:
            continue
        except (UnsafePath, OSError):
            data = b"<unreadable>"  # a symlink: keyed apart, never followed
        digest.update(f"\0{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Environment:
    """The ``$REPAIRBOT_ENV`` of one step."""

    path: Path
    #: Built earlier (by the base's setup): setup is skipped, the path is read-only.
    reused: bool
    #: Shared with later steps: commands other than setup see it read-only.
    shared: bool


class EnvironmentCache:
    """Environments built by the base's setup, one directory per key, on this worker."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ready(self, key: str) -> Path | None:
        path = self.root / key
        return path if (self.root / f"{key}.ready").is_file() and path.is_dir() else None

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
            shutil.rmtree(path, ignore_errors=True)  # a half-built one from a crash
            path.mkdir()
            try:
                yield path
            finally:
                if not (self.root / f"{key}.ready").is_file():
                    shutil.rmtree(path, ignore_errors=True)
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
                    shutil.rmtree(self.root / key, ignore_errors=True)

    def touch(self, key: str) -> None:
        with contextlib.suppress(OSError):
            (self.root / f"{key}.ready").touch()
