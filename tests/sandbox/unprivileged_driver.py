"""Run commands through app.sandbox as the process's own (unprivileged) user.

``python unprivileged_driver.py '<spec json>'``; started by
tests/sandbox/test_unprivileged.py under ``setpriv --reuid`` so that the
worker is not root, as the Dockerfile runs it. Prints one JSON object:
``{name: {"exit_code": int, "output": str, "backend": str}}``, then, when the
spec asks, what the worker finds afterwards: ``"read_back"`` (each named
workspace file's text and owner, or the error) and ``"removed"`` (whether
the worker could remove a directory the commands made), ``"left_owner"`` and
``"workspace_removed"`` (a directory left as a killed worker leaves it,
then removed with :func:`app.workspace.remove_workspace`); or
``{"unavailable": reason}`` when no sandbox was built.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

from app.repo_config import Command
from app.sandbox import Isolation, SandboxUnavailable, seccomp
from app.sandbox.egress import EgressPolicy
from app.sandbox.runner import Sandbox, run_command
from app.sandbox.userns import UserNamespace
from app.workspace import remove_workspace


def _allow_all(machine: str | None = None) -> bytes:
    """A filter that allows everything: shows what the other guards do alone."""
    return struct.pack("=HBBI", 0x06, 0, 0, seccomp.RET_ALLOW)


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("without_seccomp"):
        seccomp.program = _allow_all  # type: ignore[assignment]
    hand_back = UserNamespace.hand_back
    if spec.get("killed_before_hand_back"):
        UserNamespace.hand_back = _not_handed_back  # type: ignore[method-assign]
    isolation = Isolation(
        mode=spec["mode"],
        read_only=tuple(Path(p) for p in spec.get("read_only", [])),
        hidden=tuple(Path(p) for p in spec.get("hidden", [])),
    )
    egress = EgressPolicy(allow=(), allow_private=tuple(spec.get("allow_private", [])))
    sandbox = Sandbox(isolation=isolation, egress=egress, heartbeat_interval=0.5)
    ws = Path(spec["workspace"])
    out: dict[str, Any] = {}
    for name, command in spec["commands"].items():
        try:
            run = await _run(command, ws, sandbox)
        except SandboxUnavailable as exc:
            return {"unavailable": str(exc)}
        out[name] = {
            "exit_code": run.result.exit_code,
            "output": run.output.decode(errors="replace"),
            "backend": run.result.sandbox,
        }
    if "read_back" in spec:
        out["read_back"] = {rel: _read(ws / rel) for rel in spec["read_back"]}
    if "remove" in spec:
        try:
            shutil.rmtree(ws / spec["remove"])
            out["removed"] = True
        except OSError as exc:
            out["removed"] = str(exc)
    UserNamespace.hand_back = hand_back  # type: ignore[method-assign]
    if "remove_workspace" in spec:
        left = ws / spec["remove_workspace"]
        out["left_owner"] = os.lstat(left).st_uid
        remove_workspace(left)
        out["workspace_removed"] = not os.path.lexists(left)
    return out


def _not_handed_back(self: UserNamespace) -> None:
    """What a worker killed during the command leaves: no hand-back."""


def _read(path: Path) -> dict[str, Any]:
    try:
        return {"text": path.read_text(), "uid": os.lstat(path).st_uid}
    except OSError as exc:
        return {"error": exc.strerror}


async def _run(command: dict[str, Any], ws: Path, sandbox: Sandbox) -> Any:
    return await run_command(
        Command(shell=command["shell"]),
        cwd=ws,
        home=ws / ".home",
        tmpdir=ws / ".tmp",
        time_limit=60,
        sandbox=sandbox,
        network=command.get("network", False),
    )


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
