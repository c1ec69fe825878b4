"""Processes as the kernel sees them, for tests that check what was left running."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Running and not a zombie (orphans in a container may wait for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
