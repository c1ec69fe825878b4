"""Which files of the repository an HTTP agent is shown.

A model sees only what we send, within a byte budget. First come the files
the failure points at: tracked paths named in the reproduction output (the
frames of a traceback, ``path:line`` references), the deepest frame first,
then paths named in the issue and feedback; then small text files, smallest
first, while room is left. Paths are matched against ``git ls-files`` by
suffix, so the absolute paths of a traceback count.

Whatever is sent leaves the machine, so only regular files of the checkout
are read: tracked symlinks (mode 120000) are skipped, and every read goes
through :func:`app.checkout.read_in_checkout` (no symlink followed on the
way, the resolved path inside the checkout), because a command or agent
that ran in the workspace may have replaced a file with a link to a key.
"""

from __future__ import annotations

import asyncio
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from app.checkout import read_in_checkout
from app.workspace import Workspace, tracked_regular_files

#: Path-like words: at least one dot-extension or slash.
_PATHLIKE = re.compile(r"[\w.+-]*(?:/[\w.+-]+)*\.\w+|[\w.+-]+(?:/[\w.+-]+)+")
_BINARY_SNIFF = 8192


@dataclass(frozen=True)
class ContextFile:
    path: str
    text: str
    size: int
    truncated: bool


@dataclass(frozen=True, kw_only=True)
class ContextBudget:
    max_files: int = 8
    total_bytes: int = 60_000
    #: A file the failure points at is cut to this size rather than left out.
    per_file_bytes: int = 24_000
    #: Other files are added whole, only if at most this size.
    small_file_bytes: int = 4_000


def mentioned_paths(tracked: list[str], text: str) -> list[str]:
    """Tracked paths named in ``text``, the one named last first."""
    by_name: dict[str, list[str]] = {}
    for path in tracked:
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    found: list[str] = []
    for word in reversed(_PATHLIKE.findall(text)):
        word = word.removeprefix("./")
        matches = [
            path
            for path in by_name.get(word.rsplit("/", 1)[-1], ())
            if word == path or word.endswith("/" + path)
        ]
        # ".../src/pkg/core.py" names src/pkg/core.py, not a top-level core.py.
        best = max(matches, key=len, default=None)
        if best is not None and best not in found:
            found.append(best)
    return found


async def choose_files(
    ws: Workspace, *, failure_text: str, other_text: str, budget: ContextBudget
) -> list[ContextFile]:
    tracked = await tracked_regular_files(ws)
    # Reads of a checkout setup ran in: off the event loop.
    return await asyncio.to_thread(
        select, ws.repo, tracked, failure_text=failure_text, other_text=other_text, budget=budget
    )


def select(
    repo: Path,
    tracked: list[str],
    *,
    failure_text: str,
    other_text: str,
    budget: ContextBudget,
) -> list[ContextFile]:
    chosen: list[ContextFile] = []
    room = budget.total_bytes
    pointed = mentioned_paths(tracked, failure_text)
    pointed += [p for p in mentioned_paths(tracked, other_text) if p not in pointed]
    for path in pointed:
        if len(chosen) >= budget.max_files or room <= 0:
            return chosen
        item = _read(repo, path, limit=min(budget.per_file_bytes, room))
        if item is not None:
            chosen.append(item)
            room -= len(item.text.encode())
    sizes = []
    for path in tracked:
        if path in pointed:
            continue
        try:
            info = (repo / path).lstat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            sizes.append((info.st_size, path))
    for size, path in sorted(sizes):
        if len(chosen) >= budget.max_files or size > min(budget.small_file_bytes, room):
            break
        item = _read(repo, path, limit=size)
        if item is not None and not item.truncated:
            chosen.append(item)
            room -= item.size
    return chosen


def _read(repo: Path, path: str, *, limit: int) -> ContextFile | None:
    try:
        size = (repo / path).lstat().st_size
        data = read_in_checkout(repo, path, limit=limit)
    except OSError:
        return None  # a symlink on the way, a submodule, a directory, gone
    if b"\0" in data[:_BINARY_SNIFF]:
        return None
    return ContextFile(
        path=path,
        text=data.decode(errors="replace"),
        size=size,
        truncated=len(data) < size,
    )
