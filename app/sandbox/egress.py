"""The sandbox's only way out: a filtering HTTP(S) proxy that runs outside it.

Every command runs in a network namespace of its own (a loopback and
nothing else). A step the repository may let download (``network: setup``
on the base, an operator's networked agent) gets this proxy instead of the
host's network: it listens on a unix socket in a private directory, which
:mod:`app.sandbox.forward` makes ``127.0.0.1:3128`` inside the sandbox, and
the command gets ``HTTP_PROXY``/``HTTPS_PROXY`` (and the pip/npm spellings)
pointing there.

The proxy accepts ``CONNECT host:port`` (TLS is tunnelled, never opened)
and plain-HTTP requests in absolute form (``GET http://host/path``), and
nothing else. For each it:

1. refuses a destination that is not on the operator's allow-list
   (``REPAIRBOT_EGRESS_ALLOW``; the repository's configuration cannot add
   to it), by exact host name and port;
2. resolves the name itself, once, and refuses when ANY address is not
   globally routed (:mod:`app.sandbox.addresses`: loopback, private,
   link-local/metadata, CGNAT, multicast, ULA...), unless the operator
   listed that exact ``host:port`` in ``REPAIRBOT_EGRESS_ALLOW_PRIVATE``;
3. connects to the address it checked, not to the name (a second lookup
   could answer differently: DNS rebinding).

A refusal is an HTTP 403 whose body says why in one line; a package
manager prints it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from app.sandbox.addresses import forbidden
from app.sandbox.forward import PortForward, private_socket_dir

log = logging.getLogger("repairbot.sandbox.egress")

#: The package registries a dependency installation usually needs.
DEFAULT_ALLOW = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "deb.debian.org",
    "security.debian.org",
    "proxy.golang.org",
    "sum.golang.org",
    "index.crates.io",
    "static.crates.io",
    "rubygems.org",
    "repo.maven.apache.org",
)
#: Ports a host name without one is allowed on.
DEFAULT_PORTS = (443, 80)
#: Where the proxy is reached inside the sandbox.
PROXY_PORT = 3128
HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
RESOLVE_TIMEOUT = 30.0
#: A tunnel with no byte either way for this long is closed.
IDLE_TIMEOUT = 300.0
MAX_CONNECTIONS = 64
#: Refusals per command written to the worker's log.
LOGGED_REFUSALS = 20
#: Hop-by-hop and proxy headers never passed on to the origin.
_DROPPED = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "host"}
_LABEL = r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?"
_HOST = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Destination:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_destinations(raw: str, *, setting: str, need_port: bool = False) -> tuple[str, ...]:
    """Entries of an allow-list setting (comma or space separated), normalised.

    ``host`` or ``host:port`` (``[v6]:port``); raises ValueError with one line.
    """
    out = []
    for entry in raw.replace(",", " ").split():
        entry = entry.strip().lower().rstrip(".")
        host, port = _split(entry)
        if port is None and need_port:
            raise ValueError(f"{setting}: {entry!r} needs a port (host:port)")
        if not _valid_host(host) or (port is not None and not 0 < port < 65536):
            raise ValueError(f"{setting}: {entry!r} is not a host name or host:port")
        out.append(str(Destination(host, port)) if port is not None else host)
    return tuple(out)


def _split(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port) if port.isdigit() else -1
    return entry, None


def _valid_host(host: str) -> bool:
    if _HOST.match(host):
        return True
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class EgressPolicy:
    """Where a networked step may connect: the operator's choice, never the repository's."""

    #: ``host`` (ports 443 and 80) or ``host:port``; exact names, no wildcards.
    allow: tuple[str, ...] = DEFAULT_ALLOW
    #: Exact ``host:port`` entries that are allowed and may resolve to
    #: non-global addresses (a registry mirror on the operator's own network;
    #: the tests' local registry).
    allow_private: tuple[str, ...] = ()

    def permits(self, dest: Destination) -> bool:
        if str(dest) in self.allow or self.private_allowed(dest):
            return True
        return dest.host in self.allow and dest.port in DEFAULT_PORTS

    def private_allowed(self, dest: Destination) -> bool:
        return str(dest) in self.allow_private


class Refused(Exception):
    """The request is not let out; ``status`` and a one-line reason go back to the client."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` has (one lookup); an IP literal is itself."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass
class EgressProxy:
    """One proxy (per networked command): the allow-list, a resolver, what it refused."""

    policy: EgressPolicy
    resolve: Resolver = system_resolve
    #: One line per refused request, for tests and the command's log.
    refused: list[str] = field(default_factory=list)
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONNECTIONS))

    async def admit(self, dest: Destination) -> str:
        """The checked address to connect to; raises Refused."""
        if not self.policy.permits(dest):
            raise Refused(403, f"{dest} is not on the egress allow-list (REPAIRBOT_EGRESS_ALLOW)")
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                addresses = await self.resolve(dest.host, dest.port)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, f"{dest.host} cannot be resolved: {exc}") from None
        if not addresses:
            raise Refused(502, f"{dest.host} has no address")
        if not self.policy.private_allowed(dest):
            for address in addresses:
                reason = forbidden(address)
                if reason is not None:
                    raise Refused(403, f"{dest.host} resolves to {address} ({reason})")
        return addresses[0]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._slots.locked():
            await _answer(writer, 503, "too many connections through the egress proxy")
            writer.close()
            return
        async with self._slots:
            try:
                await self._handle(reader, writer)
            except Refused as exc:
                self.refused.append(exc.reason)
                if len(self.refused) <= LOGGED_REFUSALS:  # a loop must not flood the log
                    log.warning("egress refused: %s", exc.reason)
                await _answer(writer, exc.status, exc.reason)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                pass  # the client or the origin went away
            finally:
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise Refused(431, "request head too large") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise Refused(400, "not an HTTP/1.x proxy request")
        method, target, version = parts
        if method == "CONNECT":
            dest = _connect_target(target)
            prefix = None
        else:
            dest, path = _absolute_target(target)
            prefix = _origin_head(method, path, version, dest, lines[1:])
        address = await self.admit(dest)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                up_reader, up_writer = await asyncio.open_connection(address, dest.port)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, f"{dest} ({address}) cannot be reached: {exc}") from None
        try:
            if prefix is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(prefix)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


def _connect_target(target: str) -> Destination:
    host, port = _split(target.lower().rstrip("."))
    if port is None or not 0 < port < 65536 or not _valid_host(host):
        raise Refused(400, f"CONNECT needs host:port, got {target[:100]!r}")
    return Destination(host.rstrip("."), port)


def _absolute_target(target: str) -> tuple[Destination, str]:
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise Refused(400, "only CONNECT and absolute http:// requests go through this proxy")
    try:
        port = url.port or 80
    except ValueError:
        raise Refused(400, f"bad port in {target[:100]!r}") from None
    host = url.hostname.rstrip(".")
    if not _valid_host(host):
        raise Refused(400, f"bad host in {target[:100]!r}")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    return Destination(host, port), path


def _origin_head(
    method: str, path: str, version: str, dest: Destination, headers: Iterable[str]
) -> bytes:
    """The request as the origin expects it: origin-form, our Host, one request only."""
    host = dest.host if dest.port == 80 else str(dest)
    out = [f"{method} {path} {version}", f"Host: {host}"]
    for line in headers:
        name = line.split(":", 1)[0].strip().lower()
        if line and name not in _DROPPED:
            out.append(line)
    out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            async with asyncio.timeout(IDLE_TIMEOUT):
                data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (OSError, TimeoutError):
        pass  # one side went away or went silent: close the tunnel
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = f"repairbot egress: {reason}\n".encode()
    head = (
        f"HTTP/1.1 {status} Refused by repairbot\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        writer.write(head.encode() + body)
        await writer.drain()


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """What points a command's HTTP clients (curl, pip, npm, git...) at the proxy."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "PIP_PROXY")
    env = dict.fromkeys(names, url)
    env |= {"npm_config_proxy": url, "npm_config_https_proxy": url, "NO_PROXY": "", "no_proxy": ""}
    return env


@contextlib.asynccontextmanager
async def egress(
    policy: EgressPolicy, *, resolve: Resolver = system_resolve
) -> AsyncIterator[tuple[EgressProxy, PortForward]]:
    """A proxy serving on a fresh private socket, and the forward that makes it
    ``127.0.0.1:PROXY_PORT`` in the sandbox; closed when the block ends."""
    proxy = EgressProxy(policy, resolve)
    with private_socket_dir("repairbot-egress-") as directory:
        path = directory / "egress.sock"
        server = await asyncio.start_unix_server(proxy.handle, path=str(path), limit=HEAD_LIMIT)
        _open_to_sandbox(path)
        try:
            yield proxy, PortForward(socket=path, port=PROXY_PORT)
        finally:
            server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await server.wait_closed()


def _open_to_sandbox(path: Path) -> None:
    # The sandbox user (nobody, when the worker is root) must be able to
    # connect; outside, the 0700 directory keeps everyone else away.
    path.chmod(0o666)
