"""The disk quota's walk: blocks used and entries under the writable paths.

Standard library only, and only its light modules (``errno``, ``os``,
``stat``), because an unprivileged worker's namespace helper
(:mod:`app.sandbox.userns_helper`, ``python -I -S``) loads this file for
every command: a probe that imported :mod:`app.sandbox.quota` itself
(asyncio, concurrent.futures, subprocess, pathlib, dataclasses) spent about
40 ms of CPU per command importing them (docs/benchmarks.md,
``bench/sandbox_commands.py``).
"""

from __future__ import annotations

import errno
import os
import stat

#: Errors that make part of a tree unmeasurable, and what the quota says then.
UNMEASURABLE = {
    errno.ENAMETOOLONG: "a path too long for its disk quota to be measured",
    errno.EACCES: "a directory its disk quota cannot read",
}


def outermost(paths: list[str]) -> list[str]:
    """Each tree once: a path inside another one listed is already counted."""
    real = sorted({os.path.realpath(p) for p in paths}, key=lambda p: p.count(os.sep))
    kept: list[str] = []
    for path in real:
        if not any(path == k or path.startswith(k.rstrip(os.sep) + os.sep) for k in kept):
            kept.append(path)
    return kept


def walk(paths: list[str], max_bytes: int, max_entries: int) -> tuple[int, int, str | None]:
    """Blocks used (bytes) and entries under ``paths`` (links not followed, hard
    links counted once), and why part of it could not be measured (None:
    measured); stops as soon as either count passes its maximum."""
    used = entries = 0
    seen: set[tuple[int, int]] = set()
    stack = outermost(paths)
    while stack:
        directory = stack.pop()
        try:
            listing = os.scandir(directory)
        except OSError as exc:
            why = UNMEASURABLE.get(exc.errno or 0)
            if why is not None:
                return used, entries, why
            continue  # removed meanwhile
        with listing:
            for entry in listing:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    why = UNMEASURABLE.get(exc.errno or 0)
                    if why is not None:
                        return used, entries, why
                    continue  # removed meanwhile
                entries += 1
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    key = (info.st_dev, info.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                used += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                if used > max_bytes or entries > max_entries:
                    return used, entries, None
    return used, entries, None
