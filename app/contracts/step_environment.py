"""The ``$REPAIRBOT_ENV`` a repository-command step used: carried in a step's
result to the next step in the same workspace, never recorded. Apart from
app/contracts/repo_commands.py, which workflows use, because it names a path
(workflow modules may not import pathlib)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Environment:
    """The ``$REPAIRBOT_ENV`` of one step."""

    path: Path
    #: Built earlier (by the base's setup): setup is skipped, the path is read-only.
    reused: bool
    #: Shared with later steps: commands other than setup see it read-only.
    shared: bool
