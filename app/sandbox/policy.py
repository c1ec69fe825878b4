"""What the sandbox isolates, chosen once by the operator (``REPAIRBOT_SANDBOX``).

Modes:

``auto`` (default)
    bubblewrap when it works here, else util-linux ``unshare``; when neither
    can build a sandbox, repository code does not run (fail closed).
``bwrap`` / ``unshare``
    that backend only; refuse when it cannot be built.
``none``
    no isolation: commands run as the worker, with the worker's view of the
    file system and network. Only for a trusted single-user setup (your own
    repositories on your own machine); never for an App others can install.

Visible inside the sandbox: the system directories (read-only), the
interpreter the worker runs on (read-only, so a repository may use it),
repairbot's example agents, the operator's extra read-only paths
(``REPAIRBOT_SANDBOX_READ_ONLY``), and the workspace (read-write). Everything
else (the data directory, the database, evidence, other workspaces, the key
file, the worker's home) is simply absent; ``hidden`` paths are additionally
masked when they happen to lie inside a read-only path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.engine import PermanentError

Mode = Literal["auto", "bwrap", "unshare", "none"]
MODES: tuple[Mode, ...] = ("auto", "bwrap", "unshare", "none")

#: Read-only everywhere: what programs need to run. Missing ones are skipped.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
#: repairbot's own command agents (app/demo/agents/, shipped in the wheel), readable
#: by commands.
EXAMPLE_AGENTS = Path(__file__).resolve().parents[1] / "demo" / "agents"
#: The user and group commands run as when the worker is root ("nobody").
NOBODY = 65534


class SandboxUnavailable(PermanentError):
    """No sandbox can be built here, so repository code must not run.

    Permanent: retrying on this worker cannot help; the operator must install
    bubblewrap (or allow user namespaces), or deliberately set
    ``REPAIRBOT_SANDBOX=none``.
    """


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """How commands are isolated; one per worker, built from the settings."""

    mode: Mode = "auto"
    #: Extra read-only paths (the operator's tools, a command agent's files).
    read_only: tuple[Path, ...] = ()
    #: Masked inside the sandbox even where a read-only path would show them.
    hidden: tuple[Path, ...] = ()
    #: User and group the command runs as when the worker is root.
    uid: int = NOBODY
    gid: int = NOBODY

    def visible_paths(self) -> list[Path]:
        """Read-only paths besides the system's: the interpreter the worker runs
        on, repairbot's example agents, then the operator's."""
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        paths = [Path(p) for p in sorted(prefixes)] + [EXAMPLE_AGENTS, *self.read_only]
        return _existing_unique(paths)


def _existing_unique(paths: Iterable[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        if real.exists() and real not in seen:
            seen.append(real)
    return seen


def parse_mode(raw: str) -> Mode:
    value = raw.strip().lower() or "auto"
    for mode in MODES:
        if value == mode:
            return mode
    raise ValueError(f"REPAIRBOT_SANDBOX must be one of {', '.join(MODES)}, got {raw!r}")
