"""An unprivileged worker's command namespace, made by this root test process:
root writes the id maps itself, what ``newuidmap``/``newgidmap`` write for a
worker that is not root (0 is the worker, 65534 the sandbox user)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.sandbox.policy import NOBODY
from app.sandbox.userns import Subordinate

#: Tests that make such a namespace write id maps, which only root may.
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="writes a namespace's id maps as root")

#: The sandbox user outside the namespace (a subordinate uid no one has).
SANDBOX_USER = Subordinate(uid=100000, gid=100000)


def root_maps(pid: int, ids: Subordinate) -> None:
    for name, sub in (("uid_map", ids.uid), ("gid_map", ids.gid)):
        Path(f"/proc/{pid}/{name}").write_text(f"0 0 1\n{NOBODY} {sub} 1\n")
