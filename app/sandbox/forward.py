"""Forward a unix socket outside the sandbox to ``127.0.0.1:PORT`` inside it.

The sandbox has a network namespace of its own (a loopback and nothing
else), so a server repairbot runs outside (the egress proxy, a model-API
proxy that adds the credential) is reachable from inside only through a
unix socket bound into the sandbox. Most programs want a TCP address, not a
socket path: a small forwarder (:mod:`app.sandbox.forwarder`, standard
library only) starts inside the sandbox before the command, listens on
``127.0.0.1:PORT`` and relays each connection to the socket.

Usage (``serve`` is any asyncio server listening on ``path``)::

    from app.sandbox.forward import PortForward, private_socket_dir

    with private_socket_dir() as directory:
        path = directory / "model.sock"
        server = await asyncio.start_unix_server(serve, path=path)
        path.chmod(0o666)  # the sandbox user connects; the directory is 0700
        run = await run_command(
            command, ..., forwards=[PortForward(socket=path, port=8700)],
            extra_env={"OPENAI_BASE_URL": "http://127.0.0.1:8700/v1"},
        )

The forwarder runs as the sandbox user and only relays bytes: whatever the
server outside accepts is the whole policy. The socket is bound at
:meth:`PortForward.inside` (``/run/repairbot/forward-PORT.sock``); its
directory outside is never visible in the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where forwarded sockets appear inside the sandbox.
INSIDE_DIR = "/run/repairbot"
#: The forwarder's source, run with ``python -I -S -c`` (no file needs to be visible).
FORWARDER = Path(__file__).with_name("forwarder.py")


@dataclass(frozen=True)
class PortForward:
    """``127.0.0.1:port`` inside the sandbox relays to the unix socket ``socket`` outside."""

    socket: Path
    port: int

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"a forwarded port must be 1-65535, got {self.port}")

    def inside(self) -> str:
        """The socket's path inside the sandbox."""
        return f"{INSIDE_DIR}/forward-{self.port}.sock"


def wrap(argv: Sequence[str], forwards: Sequence[PortForward], *, sandboxed: bool) -> list[str]:
    """``argv`` run behind the forwarder, which listens before the command starts.

    ``sandboxed``: the socket is bound at :meth:`PortForward.inside`; without a
    sandbox (``REPAIRBOT_SANDBOX=none``) the forwarder uses the host path.
    """
    if not forwards:
        return list(argv)
    ports = {f.port for f in forwards}
    if len(ports) != len(forwards):
        raise ValueError("two forwards share a port")
    spec = [[f.port, f.inside() if sandboxed else str(f.socket)] for f in forwards]
    return [sys.executable, "-I", "-S", "-c", _source(), json.dumps(spec), *argv]


def _source() -> str:
    return FORWARDER.read_text()


@contextlib.contextmanager
def private_socket_dir(prefix: str = "repairbot-sock-") -> Iterator[Path]:
    """A 0700 directory for sockets: only the worker's user can reach them outside.

    Short (under the system temporary directory) because a unix socket path
    is limited to 107 bytes.
    """
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
