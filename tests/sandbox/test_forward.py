"""The port-forward primitive: a unix socket outside is 127.0.0.1:PORT inside.

Real sandboxes (each backend), a real asyncio server on a real unix socket.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.repo_config import Command
from app.sandbox import Isolation
from app.sandbox.forward import PortForward, private_socket_dir, wrap
from app.sandbox.runner import CommandRun, Sandbox, run_command

PY = sys.executable


@pytest.fixture(params=["bwrap", "unshare"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox(isolation=Isolation(mode=request.param), heartbeat_interval=0.1)


@pytest.fixture
async def echo_socket() -> AsyncIterator[Path]:
    """A server outside the sandbox that answers ``echo:<what it got>``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(1000)
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    with private_socket_dir() as directory:
        path = directory / "echo.sock"
        server = await asyncio.start_unix_server(serve, path=str(path))
        path.chmod(0o666)
        try:
            yield path
        finally:
            server.close()
            await server.wait_closed()


async def run(tmp_path: Path, sandbox: Sandbox, code: str, **kwargs: object) -> CommandRun:
    return await run_command(
        Command(argv=[PY, "-c", code]),
        cwd=tmp_path / "ws",
        home=tmp_path / "ws" / ".home",
        tmpdir=tmp_path / "ws" / ".tmp",
        time_limit=30,
        sandbox=sandbox,
        **kwargs,  # type: ignore[arg-type]
    )


CLIENT = (
    "import socket\n"
    "s = socket.create_connection(('127.0.0.1', 8700), 5)\n"
    "s.sendall(b'hello')\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "print(s.recv(100).decode())\n"
)


async def test_a_socket_outside_is_a_loopback_port_inside(
    tmp_path: Path, sandbox: Sandbox, echo_socket: Path
) -> None:
    (tmp_path / "ws").mkdir()
    out = await run(tmp_path, sandbox, CLIENT, forwards=[PortForward(echo_socket, 8700)])
    assert out.result.exit_code == 0, out.output
    assert out.output.strip() == b"echo:hello"


async def test_without_the_forward_the_port_is_closed(
    tmp_path: Path, sandbox: Sandbox, echo_socket: Path
) -> None:
    (tmp_path / "ws").mkdir()
    out = await run(tmp_path, sandbox, CLIENT)
    assert out.result.exit_code != 0
    assert b"Connection refused" in out.output


async def test_the_socket_directory_outside_is_not_visible(
    tmp_path: Path, sandbox: Sandbox, echo_socket: Path
) -> None:
    (tmp_path / "ws").mkdir()
    code = (
        "import os\n"
        f"print(os.path.exists({str(echo_socket.parent)!r}))\n"
        "print(sorted(os.listdir('/run/repairbot')))\n"
    )
    out = await run(tmp_path, sandbox, code, forwards=[PortForward(echo_socket, 8700)])
    assert out.output.split() == [b"False", b"['forward-8700.sock']"], out.output


def test_ports_must_be_distinct_and_valid(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="share a port"):
        same_port = [PortForward(tmp_path / "a", 1), PortForward(tmp_path / "b", 1)]
        wrap(["true"], same_port, sandboxed=True)
    with pytest.raises(ValueError, match="1-65535"):
        PortForward(tmp_path / "a", 0)
