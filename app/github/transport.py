"""The transport under every githubkit client of a process: shared, never
closed by a client, and sending again a safe request whose connection was
lost before any answer.

**Shared, not closed by a client.** Outside ``async with``, githubkit opens an
``httpx.AsyncClient`` around each request and closes it afterwards, and
closing an httpx client closes its transport. All clients of a
:class:`~app.github.client.GitHubClientFactory` share one transport (one
connection pool), so every finished request used to close the pool under
every other request in flight: their connections were aborted (anyio's
``ClosedResourceError``, seen as ``ReadError('')``), and no connection was
ever reused. Measured with ``python -m bench.load --runs 100``: 1,800 to
5,300 requests per benchmark lost that way, 22 to 35 runs ending in error
before the resend below existed. :class:`SharedTransport` ignores a
client's close; :meth:`SharedTransport.close` (the factory's ``aclose``)
closes the pool for good.

**Resent when lost.**
A keep-alive connection can be closed by the server (its idle timeout, a
load balancer, a deploy) at the moment the client reuses it: the request
meets a reset or an empty read, and the client cannot tell whether the
server saw it. Browsers, Go's ``net/http`` and urllib3 all send such a
request once more when doing so cannot double an effect. repairbot does the
same, and only then:

- reads (``GET``, ``HEAD``, ``OPTIONS``), and
- minting an installation token (``POST /app/installations/{id}/access_tokens``):
  a second token is harmless, the first simply expires unused.

Every other mutation is left alone: its loss surfaces as an error the
activity classifies as ambiguous, and the step reconciles through its
marker in the GitHub object instead of guessing (docs/architecture.md).
"""

from __future__ import annotations

import logging
import re

import httpx

log = logging.getLogger("repairbot.github")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN_MINT = re.compile(r"/app/installations/\d+/access_tokens$")
#: What a connection lost before the answer looks like to httpx.
LOST = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def safe_to_resend(request: httpx.Request) -> bool:
    if request.method in SAFE_METHODS:
        return True
    return request.method == "POST" and TOKEN_MINT.search(request.url.path) is not None


class SharedTransport(httpx.AsyncBaseTransport):
    """Wraps the process's transport: a safe request whose connection was
    lost before any answer is sent again, up to ``resends`` times, at once (a
    fresh connection is what it needs, not a wait); a client's ``aclose``
    leaves the shared pool open."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, resends: int = 2) -> None:
        self.inner = inner
        self.resends = resends

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(self.resends):
            try:
                return await self.inner.handle_async_request(request)
            except LOST as exc:
                if not safe_to_resend(request):
                    raise
                log.info(
                    "connection lost before the answer to %s %s (%r); sending it again",
                    request.method,
                    request.url.path,
                    exc,
                )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Called by every httpx client githubkit closes after a request: the
        pool is shared with the other clients, so it stays open."""

    async def close(self) -> None:
        """Close the pool for good (the owner's shutdown)."""
        await self.inner.aclose()
