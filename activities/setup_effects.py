"""What the base's setup left in the checkout, and how to carry it to another one.

Setups that install into the repository (``pip install -e .`` into a
``.venv`` of the checkout, ``pip install --target .deps``) leave two things
the environment cache must carry besides ``$REPAIRBOT_ENV``:

- new paths in the checkout (``.venv``, ``src/pkg.egg-info``, ``.deps``):
  saved with the cache entry and copied into a later step's checkout;
- the checkout's absolute path written into files (an editable install's
  ``.pth`` file, script shebangs, ``bin/activate``): each workspace has its
  own path, so those files are rewritten to name the new checkout (and the
  new ``$REPAIRBOT_ENV``) in the copy.

Only text is rewritten. A file with NUL bytes that names the checkout (a
compiled extension with the path inside) cannot be, and an installation that
*copied* the project's code into the environment (pip's ``direct_url.json``
for a non-editable install from the checkout) would test the base's code
instead of the candidate's: either makes the entry unusable by other
checkouts, and setup runs again there, as without the cache.

Everything here reads what repository code wrote: no symlink is followed,
only regular files are read, with size and count caps.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: Files larger than this are not scanned for the checkout's path (wheels,
#: databases); a reference inside one is not rewritten.
_MAX_SCANNED_FILE = 8 * 1024 * 1024
#: A tree with more entries than this is not carried (a setup that vendored
#: the world into the checkout): the entry is kept for its own checkout only.
MAX_ENTRIES = 200_000
_SKIPPED_DIRS = {".git"}


class TooManyEntries(Exception):
    """The checkout has more entries than :data:`MAX_ENTRIES`."""


def listing(root: Path) -> dict[str, tuple[int, int, float]]:
    """Every path under ``root`` (not ``.git``), no symlink followed: mode, size, mtime."""
    found: dict[str, tuple[int, int, float]] = {}
    for relative, info in _walk(root):
        found[relative] = (info.st_mode, info.st_size, info.st_mtime)
        if len(found) > MAX_ENTRIES:
            raise TooManyEntries(str(root))
    return found


def _walk(root: Path, prefix: str = "") -> Iterator[tuple[str, os.stat_result]]:
    try:
        entries = list(os.scandir(root / prefix if prefix else root))
    except OSError:
        return
    for entry in entries:
        if not prefix and entry.name in _SKIPPED_DIRS:
            continue
        relative = f"{prefix}{entry.name}"
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        yield relative, info
        if stat.S_ISDIR(info.st_mode):
            yield from _walk(root, relative + "/")


@dataclass(frozen=True)
class CheckoutEffects:
    #: Topmost paths setup created in the checkout (relative, '/'-separated).
    created: list[str] = field(default_factory=list)
    #: Tracked (pre-existing) files setup changed: such a setup cannot be
    #: replayed on another checkout by copying.
    changed: list[str] = field(default_factory=list)


def effects(before: dict[str, tuple[int, int, float]], root: Path) -> CheckoutEffects:
    after = listing(root)
    new = sorted(p for p in after if p not in before)
    created: list[str] = []
    for path in new:
        if not any(path.startswith(top + "/") for top in created):
            created.append(path)
    changed = sorted(
        p
        for p, (mode, size, mtime) in after.items()
        if p in before
        and not stat.S_ISDIR(mode)
        and (before[p][1], before[p][2]) != (size, mtime)
        and not _is_cache(p)
    )
    return CheckoutEffects(created=[p for p in created if not _is_cache(p)], changed=changed)


def _is_cache(path: str) -> bool:
    """Bytecode and tool caches: anything that runs Python leaves them; never carried."""
    parts = path.split("/")
    return "__pycache__" in parts or ".pytest_cache" in parts or path.endswith((".pyc", ".pyo"))


@dataclass
class References:
    """Files under a tree that name a path, found without following symlinks."""

    text: list[str] = field(default_factory=list)
    #: Why the tree cannot be moved to another checkout, if it cannot.
    blocked: str | None = None


def references(root: Path, needles: list[bytes], *, project: bytes | None = None) -> References:
    """Regular files under ``root`` that contain any of ``needles``.

    ``project``: the checkout's path; a pip ``direct_url.json`` naming it
    without ``editable`` means the project was copied into the tree.
    """
    found = References()
    for relative, info in _walk(root):
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SCANNED_FILE:
            continue
        if _is_cache(relative):
            continue  # never carried (see save): bytecode names its source's path
        data = _read_regular(root / relative)
        if data is None or not any(n in data for n in needles):
            continue
        if b"\0" in data:
            found.blocked = f"{relative} (binary) names the checkout"
            continue
        copied = project is not None and relative.endswith("direct_url.json")
        if copied and project is not None and _copied_project(data, project):
            found.blocked = f"{relative}: the project itself was installed by copy"
        found.text.append(relative)
    return found


def _copied_project(data: bytes, project: bytes) -> bool:
    try:
        record = json.loads(data)
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    url = str(record.get("url", ""))
    info = record.get("dir_info")
    editable = isinstance(info, dict) and info.get("editable") is True
    return url.removeprefix("file://").rstrip("/") == project.decode() and not editable


def _read_regular(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SCANNED_FILE:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(_MAX_SCANNED_FILE + 1)
    finally:
        os.close(fd)


def rewrite(root: Path, files: list[str], replacements: list[tuple[bytes, bytes]]) -> None:
    """Replace paths in ``files`` (relative to ``root``, found by :func:`references`)."""
    for relative in files:
        path = root / relative
        if not _inside_without_links(root, relative):
            continue
        data = _read_regular(path)
        if data is None:
            continue
        for old, new in replacements:
            data = data.replace(old, new)
        mode = os.lstat(path).st_mode
        os.chmod(path, stat.S_IMODE(mode) | stat.S_IWUSR)
        with open(path, "wb") as handle:
            handle.write(data)
        os.chmod(path, stat.S_IMODE(mode))


def _inside_without_links(root: Path, relative: str) -> bool:
    """Every component of ``root/relative`` below ``root`` is no symlink."""
    parts = [p for p in relative.split("/") if p]
    if not parts or ".." in parts:
        return False
    current = root
    for part in parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True  # not there yet: nothing to follow
    return True


def save(checkout: Path, created: list[str], into: Path) -> None:
    """Copy the paths setup created out of the checkout (symlinks as symlinks)."""
    for relative in created:
        _copy(checkout / relative, into / relative)


def apply(saved: Path, created: list[str], checkout: Path) -> list[str]:
    """Copy saved paths into another checkout; returns the ones copied.

    A path the checkout already has (the patch added it) or that lies below
    a symlink there (the patch planted one) is left alone: the worker never
    writes through a link repository code made.
    """
    copied = []
    for relative in created:
        target = checkout / relative
        if not _inside_without_links(checkout, relative) or os.path.lexists(target):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(saved / relative, target)
        copied.append(relative)
    return copied


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    info = os.lstat(source)
    if stat.S_ISDIR(info.st_mode):
        # Bytecode names the path of its source: Python rebuilds it where it runs.
        shutil.copytree(
            source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
        )
    elif stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(info.st_mode):
        shutil.copy2(source, target, follow_symlinks=False)
