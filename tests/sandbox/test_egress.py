"""A networked step reaches the operator's allow-list through the egress proxy, nothing else.

Real sandboxes (each backend), real sockets: a "registry" (a tiny HTTP server
on a loopback port that the test's allow-list names exactly), a "web port"
standing in for repairbot's own services, PostgreSQL and Redis as they run
beside the tests. Each guard has its own test: the network namespace
(``--unshare-net``), the allow-list, the address check, and connecting to the
address that was checked (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from app.repo_config import Command
from app.sandbox import Isolation
from app.sandbox import egress as egress_module
from app.sandbox.egress import Destination, EgressPolicy, EgressProxy, egress, system_resolve
from app.sandbox.runner import CommandRun, Sandbox, run_command

PY = sys.executable


@dataclass
class Listener:
    """A loopback TCP server that records every byte it is sent."""

    port: int
    host: str = "127.0.0.1"
    got: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None


async def listen(host: str, answer: bytes) -> Listener:
    listener = Listener(port=0, host=host)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(4096)
        listener.got.append(data)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()
        writer.close()

    listener.server = await asyncio.start_server(serve, host, 0)
    listener.port = listener.server.sockets[0].getsockname()[1]
    return listener


async def serving(answer: bytes) -> AsyncIterator[Listener]:
    server = await listen("127.0.0.1", answer)
    yield server
    assert server.server is not None
    server.server.close()


@pytest.fixture
async def registry() -> AsyncIterator[Listener]:
    async for server in serving(b"registry-ok"):
        yield server


@pytest.fixture
async def web_port() -> AsyncIterator[Listener]:
    """Stands in for repairbot's web port, the emulator: anything on the worker's loopback."""
    async for server in serving(b"SECRET-web"):
        yield server


@pytest.fixture(params=["bwrap", "unshare"])
def sandbox(request: pytest.FixtureRequest, registry: Listener) -> Sandbox:
    policy = EgressPolicy(allow=("pypi.org",), allow_private=(f"127.0.0.1:{registry.port}",))
    isolation = Isolation(mode=request.param)
    return Sandbox(isolation=isolation, heartbeat_interval=0.1, egress=policy)


async def run(tmp_path: Path, sandbox: Sandbox, code: str, *, network: bool) -> CommandRun:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return await run_command(
        Command(argv=[PY, "-c", code]),
        cwd=ws,
        home=ws / ".home",
        tmpdir=ws / ".tmp",
        time_limit=60,
        sandbox=sandbox,
        network=network,
    )


#: Inside the sandbox: try each (host, port) directly; print one JSON line of outcomes.
DIRECT = """
import json, socket, sys
out = {}
for host, port in json.loads(sys.argv[1]):
    try:
        s = socket.create_connection((host, port), 3)
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        out[f"{host}:{port}"] = "REACHED " + s.recv(100).decode(errors="replace")
    except OSError as exc:
        out[f"{host}:{port}"] = f"blocked {exc}"
print(json.dumps(out))
"""

#: Inside the sandbox: ask the proxy (from HTTPS_PROXY) to CONNECT to each target.
VIA_PROXY = """
import json, os, socket, sys
proxy = os.environ["HTTPS_PROXY"].rsplit(":", 1)
out = {}
for target in json.loads(sys.argv[1]):
    s = socket.create_connection((proxy[0].split("//")[1], int(proxy[1])), 5)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    answer = s.recv(300).decode(errors="replace")
    if answer.startswith("HTTP/1.1 200"):
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        answer += s.recv(300).decode(errors="replace")
    out[target] = answer
print(json.dumps(out))
"""


def with_args(code: str, args: object) -> str:
    return f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(args))}]\n" + code


def outcomes(out: CommandRun) -> dict[str, str]:
    assert out.result.exit_code == 0, out.output
    # The last JSON line: the proxy's refusals are listed after the output.
    lines = [line for line in out.output.decode().splitlines() if line.startswith("{")]
    result: dict[str, str] = json.loads(lines[-1])
    return result


async def test_the_allowed_registry_is_reachable_through_the_proxy(
    tmp_path: Path, sandbox: Sandbox, registry: Listener
) -> None:
    code = (
        "import urllib.request\n"
        f"print(urllib.request.urlopen('http://127.0.0.1:{registry.port}/simple/', timeout=10)"
        ".read().decode())\n"
    )
    out = await run(tmp_path, sandbox, code, network=True)
    assert out.result.exit_code == 0, out.output
    assert out.output.strip().endswith(b"registry-ok") and out.result.network
    assert registry.got and registry.got[0].startswith(b"GET /simple/ HTTP/1.1")
    tunnel = await run(
        tmp_path, sandbox, with_args(VIA_PROXY, [f"127.0.0.1:{registry.port}"]), network=True
    )
    assert outcomes(tunnel)[f"127.0.0.1:{registry.port}"].endswith("registry-ok")


async def test_a_networked_step_reaches_nothing_directly(
    tmp_path: Path, sandbox: Sandbox, registry: Listener, web_port: Listener
) -> None:
    """The guard: a network namespace of its own even for a networked step."""
    targets = [
        ["127.0.0.1", 5432],  # PostgreSQL beside the tests
        ["127.0.0.1", 6379],  # Redis
        ["127.0.0.1", web_port.port],
        ["127.0.0.1", registry.port],  # even the allowed registry: only via the proxy
        ["127.0.0.2", web_port.port],
        ["10.0.0.1", 80],
        ["192.168.0.1", 80],
        ["172.16.0.1", 80],
        ["169.254.169.254", 80],
    ]
    got = outcomes(await run(tmp_path, sandbox, with_args(DIRECT, targets), network=True))
    assert all(v.startswith("blocked") for v in got.values()), got
    assert web_port.got == [] and registry.got == []


async def test_a_networked_step_cannot_reach_the_hosts_abstract_unix_sockets(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """Abstract sockets (D-Bus, container runtimes) belong to the network namespace."""
    name = f"repairbot-test-{os.getpid()}-{id(sandbox)}"
    got: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_unix_server(serve, path="\0" + name)
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect('\\0{name}'); s.sendall(b'stolen'); print('REACHED')\n"
        "except OSError as exc:\n"
        "    print('blocked', exc)\n"
    )
    try:
        out = await run(tmp_path, sandbox, code, network=True)
    finally:
        server.close()
    assert out.output.startswith(b"blocked"), out.output
    assert got == []


async def test_through_the_proxy_local_services_and_metadata_are_refused(
    tmp_path: Path, sandbox: Sandbox, web_port: Listener
) -> None:
    targets = [
        "127.0.0.1:5432",
        "127.0.0.1:6379",
        f"127.0.0.1:{web_port.port}",
        f"127.0.0.3:{web_port.port}",
        f"localhost:{web_port.port}",
        "10.1.2.3:443",
        "192.168.1.1:443",
        "169.254.169.254:80",
        "[::1]:5432",
    ]
    out = await run(tmp_path, sandbox, with_args(VIA_PROXY, targets), network=True)
    got = outcomes(out)
    assert all(v.startswith("HTTP/1.1 403") for v in got.values()), got
    assert web_port.got == []
    assert out.output.count(b"[repairbot egress refused: ") == len(targets)


async def test_the_log_says_which_host_was_refused(tmp_path: Path, sandbox: Sandbox) -> None:
    """A package manager rarely prints the 403's body: the command's log does."""
    code = (
        "import urllib.request\n"
        "try:\n"
        "    urllib.request.urlopen('http://example.com/', timeout=10)\n"
        "except OSError as exc:\n"
        "    print('failed', exc)\n"
    )
    out = await run(tmp_path, sandbox, code, network=True)
    note = b"[repairbot egress refused: example.com:80 is not on the egress allow-list"
    assert note in out.output and note.decode() in out.result.output_tail


async def test_a_step_without_network_has_no_proxy_either(
    tmp_path: Path, sandbox: Sandbox, registry: Listener
) -> None:
    code = "import os\nprint(os.environ.get('HTTPS_PROXY'))\n" + DIRECT
    out = await run(tmp_path, sandbox, with_args(code, [["127.0.0.1", 3128]]), network=False)
    assert out.output.startswith(b"None\n") and not out.result.network
    assert outcomes(out)["127.0.0.1:3128"].startswith("blocked")


# --- The proxy's own guards, each alone (a real proxy on a real socket, no sandbox) ---


async def ask(
    policy: EgressPolicy, request: bytes, resolve: object = system_resolve
) -> tuple[bytes, EgressProxy]:
    async with egress(policy, resolve=resolve) as (proxy, forward):  # type: ignore[arg-type]
        reader, writer = await asyncio.open_unix_connection(str(forward.socket))
        writer.write(request)
        await writer.drain()
        answer = await reader.read()
        writer.close()
    return answer, proxy


def counting(answers: dict[str, list[list[str]]]) -> tuple[object, list[str]]:
    """A resolver answering each name's lookups in turn (the last answer repeats)."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        queue = answers[host]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return resolve, asked


async def test_the_allow_list_refuses_before_any_lookup(registry: Listener) -> None:
    resolve, asked = counting({"example.com": [["93.184.215.14"]]})
    answer, proxy = await ask(
        EgressPolicy(allow=("pypi.org",)), b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", resolve
    )
    assert answer.startswith(b"HTTP/1.1 403") and b"not on the egress allow-list" in answer
    assert asked == [] and proxy.refused
    # Ports are part of the entry: pypi.org is allowed on 443 and 80 only.
    answer, _ = await ask(
        EgressPolicy(allow=("pypi.org",)), b"CONNECT pypi.org:22 HTTP/1.1\r\n\r\n"
    )
    assert b"not on the egress allow-list" in answer


@pytest.mark.parametrize(
    "addresses",
    [
        ["127.0.0.1"],
        ["10.0.0.7"],
        ["172.20.1.1"],
        ["192.168.9.9"],
        ["169.254.169.254"],
        ["100.64.1.1"],
        ["fe80::1"],
        ["fd12::1"],
        ["::ffff:127.0.0.1"],
        ["224.0.0.251"],
        ["0.0.0.0"],
        ["151.101.64.223", "127.0.0.1"],  # ANY bad address refuses the name
    ],
)
async def test_an_allowed_name_resolving_to_a_private_address_is_refused(
    registry: Listener, addresses: list[str]
) -> None:
    resolve, _ = counting({"registry.test": [addresses]})
    policy = EgressPolicy(allow=(f"registry.test:{registry.port}",))
    request = f"GET http://registry.test:{registry.port}/ HTTP/1.1\r\n\r\n".encode()
    answer, _ = await ask(policy, request, resolve)
    assert answer.startswith(b"HTTP/1.1 403") and b"resolves to" in answer, answer
    assert registry.got == []


async def test_a_name_in_etc_hosts_pointing_at_loopback_is_refused(web_port: Listener) -> None:
    policy = EgressPolicy(allow=(f"localhost:{web_port.port}",))
    answer, _ = await ask(policy, f"CONNECT localhost:{web_port.port} HTTP/1.1\r\n\r\n".encode())
    assert b"resolves to 127.0.0.1 (loopback)" in answer and web_port.got == []


async def test_the_proxy_connects_to_the_address_it_checked(registry: Listener) -> None:
    """DNS rebinding: a second lookup would answer elsewhere; there is no second lookup."""
    # The rebound address serves on the registry's port, so a second lookup would land there.
    elsewhere = await listen_on("127.0.0.3", registry.port, b"SECRET-rebound")
    try:
        resolve, asked = counting({"registry.test": [["127.0.0.1"], ["127.0.0.3"]]})
        policy = EgressPolicy(allow_private=(f"registry.test:{registry.port}",))
        request = f"GET http://registry.test:{registry.port}/x HTTP/1.1\r\n\r\n".encode()
        answer, _ = await ask(policy, request, resolve)
        assert answer.endswith(b"registry-ok") and asked == ["registry.test"]
        assert elsewhere.got == []
    finally:
        assert elsewhere.server is not None
        elsewhere.server.close()


async def listen_on(host: str, port: int, answer: bytes) -> Listener:
    listener = Listener(port=port, host=host)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        listener.got.append(await reader.read(4096))
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + answer)
        await writer.drain()
        writer.close()

    listener.server = await asyncio.start_server(serve, host, port)
    return listener


async def test_the_origin_gets_the_checked_host_and_one_request(registry: Listener) -> None:
    policy = EgressPolicy(allow_private=(f"127.0.0.1:{registry.port}",))
    request = (
        f"GET http://127.0.0.1:{registry.port}/a?b=1 HTTP/1.1\r\nHost: internal.example\r\n"
        "Proxy-Authorization: Basic eDp5\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    answer, _ = await ask(policy, request)
    assert answer.endswith(b"registry-ok")
    sent = registry.got[0].decode()
    assert sent.startswith("GET /a?b=1 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{registry.port}" in sent and "internal.example" not in sent
    assert "Proxy-Authorization" not in sent and "Connection: close" in sent


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org HTTP/1.1\r\n\r\n",
        b"garbage\r\n\r\n",
    ],
)
async def test_anything_else_gets_one_clear_line(request_line: bytes) -> None:
    answer, _ = await ask(EgressPolicy(), request_line)
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert answer.startswith(b"HTTP/1.1 400") and body.count(b"\n") == 1, answer


def test_destination_prints_v6_in_brackets() -> None:
    assert str(Destination("::1", 80)) == "[::1]:80"
    assert str(replace(Destination("a", 1), port=2)) == "a:2"


async def test_connections_beyond_the_cap_are_answered_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(egress_module, "MAX_CONNECTIONS", 3)
    async with egress(EgressPolicy()) as (proxy, forward):
        held = [await asyncio.open_unix_connection(str(forward.socket)) for _ in range(3)]
        while not proxy._slots.locked():  # all three handlers hold a slot (recorded state)
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_unix_connection(str(forward.socket))
        answer = await reader.read()
        writer.close()
        for _, held_writer in held:
            held_writer.close()
    assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer


async def test_an_oversized_request_head_is_refused() -> None:
    answer, _ = await ask(EgressPolicy(), b"GET http://pypi.org/ HTTP/1.1\r\nX: " + b"a" * 20000)
    assert answer.startswith(b"HTTP/1.1 431")


async def test_a_head_that_never_ends_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress_module, "HEAD_TIMEOUT", 0.2)
    answer, proxy = await ask(EgressPolicy(), b"CONNECT pypi.org:443 HTTP/1.1\r\n")
    assert answer == b"" and proxy.refused == []


async def test_a_silent_tunnel_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress_module, "IDLE_TIMEOUT", 0.2)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # says nothing, closes only when the proxy does
        writer.close()

    origin = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    try:
        policy = EgressPolicy(allow_private=(f"127.0.0.1:{port}",))
        answer, _ = await ask(policy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        origin.close()
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"  # then closed
