"""Run commands through app.sandbox as the process's own (unprivileged) user.

``python unprivileged_driver.py '<spec json>'``; started by
tests/sandbox/test_unprivileged.py under ``setpriv --reuid`` so that the
worker is not root, as the Dockerfile runs it. Prints one JSON object:
``{name: {"exit_code": int, "output": str, "backend": str, "quota_exceeded": str | None}}``.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
from pathlib import Path
from typing import Any

from app.repo_config import Command
from app.sandbox import Isolation, seccomp
from app.sandbox.egress import EgressPolicy
from app.sandbox.quota import DiskQuota
from app.sandbox.runner import ResourceLimits, Sandbox, run_command


def _allow_all(machine: str | None = None) -> bytes:
    """A filter that allows everything: shows what the other guards do alone."""
    return struct.pack("=HBBI", 0x06, 0, 0, seccomp.RET_ALLOW)


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("without_seccomp"):
        seccomp.program = _allow_all  # type: ignore[assignment]
    isolation = Isolation(
        mode=spec["mode"],
        read_only=tuple(Path(p) for p in spec.get("read_only", [])),
        hidden=tuple(Path(p) for p in spec.get("hidden", [])),
    )
    egress = EgressPolicy(allow=(), allow_private=tuple(spec.get("allow_private", [])))
    limits = ResourceLimits()
    if spec.get("quota_mib"):
        quota = DiskQuota(bytes=spec["quota_mib"] << 20, interval=0.05)
        limits = ResourceLimits(disk_quota=quota, tmpfs_bytes=spec["quota_mib"] << 19)
    sandbox = Sandbox(isolation=isolation, egress=egress, limits=limits, heartbeat_interval=0.5)
    ws = Path(spec["workspace"])
    out = {}
    for name, command in spec["commands"].items():
        run = await run_command(
            Command(shell=command["shell"]),
            cwd=ws,
            home=ws / ".home",
            tmpdir=ws / ".tmp",
            time_limit=60,
            sandbox=sandbox,
            network=command.get("network", False),
        )
        out[name] = {
            "exit_code": run.result.exit_code,
            "output": run.output.decode(errors="replace"),
            "backend": run.result.sandbox,
            "quota_exceeded": run.result.quota_exceeded,
        }
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
