"""Assemble the emulator: state, REST under a base path, control API, git smart HTTP.

``Emulator(...).asgi()`` is a Starlette app; serve it with uvicorn
(``python -m emulator``) or call it in-process through ``httpx.ASGITransport``.

Layout of the URL space::

    {base_path}/...            GitHub's REST API (base_path "" or e.g. "/api/v3")
    /_emulator/...             control and scripting API (see emulator.control)
    /{owner}/{repo}.git/...    git smart HTTP (see emulator.smart_http)
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount, Route

from emulator.delivery import Dispatcher, Sender
from emulator.events import Events
from emulator.faults import FaultRegistry
from emulator.ratelimit import RateCounter
from emulator.render.base import Urls
from emulator.rest import all_specs, starlette_path
from emulator.rest.graphql import SPEC as GRAPHQL
from emulator.rest.http import Endpoint
from emulator.rest.unrouted import GitOrNotFound, json_not_found
from emulator.state import App, Store, User


class Emulator:
    """One emulated GitHub. Keyword-only configuration:

    - ``root``: where bare repositories live (a temporary directory if None).
    - ``base_path``: REST prefix, "" like api.github.com or "/api/v3" like GHES.
    - ``public_url``: origin used in URLs inside webhook payloads (REST answers
      use the origin the caller reached); default ``http://localhost``.
    - ``webhook_url`` / ``webhook_secret``: defaults for apps registered without their own.
    - ``token_ttl``: installation token lifetime (GitHub: one hour).
    - ``sender``: replaces the HTTP webhook sender (tests may capture in-process).
    - ``threaded``: REST handlers run in a worker thread, so a served emulator's
      event loop keeps answering while one of them waits for git. False runs
      them on the loop: for one caller in the same process sending one request
      at a time (a benchmark), where the thread hop per request is pure cost.
    """

    def __init__(
        self,
        *,
        root: Path | None = None,
        base_path: str = "",
        public_url: str | None = None,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        token_ttl: timedelta = timedelta(hours=1),
        sender: Sender | None = None,
        threaded: bool = True,
    ) -> None:
        if root is None:
            self._tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(
                prefix="emulator-"
            )
            root = Path(self._tmp.name)
        else:
            self._tmp = None
        self.base_path = "/" + base_path.strip("/") if base_path.strip("/") else ""
        self.public_url = public_url.rstrip("/") if public_url else None
        self.default_webhook_url = webhook_url
        self.default_webhook_secret = webhook_secret
        self.store = Store(root=root, token_ttl=token_ttl)
        self.faults = FaultRegistry()
        self.dispatcher = Dispatcher(sender)
        self.events = Events(self)
        self.rate = RateCounter(lambda: self.store.now().timestamp())
        self.threaded = threaded
        self._seen_origin: str | None = None

    # -- URLs ------------------------------------------------------------------

    def urls_for(self, request: Request) -> Urls:
        origin = f"{request.url.scheme}://{request.url.netloc}"
        self._seen_origin = origin
        return Urls(api=origin + self.base_path, web=origin)

    def webhook_urls(self) -> Urls:
        origin = self.public_url or self._seen_origin or "http://localhost"
        return Urls(api=origin + self.base_path, web=origin)

    # -- identities ------------------------------------------------------------

    def bot_user(self, app: App) -> User:
        """The ``<slug>[bot]`` account an app's actions are attributed to."""
        login = f"{app.slug}[bot]"
        return self.store.user(login) or self.store.add_user(login, type="Bot")

    # -- ASGI ------------------------------------------------------------------

    def rest_routes(self) -> list[BaseRoute]:
        return [
            Route(starlette_path(spec.template), Endpoint(self, spec), methods=[spec.method])
            for spec in all_specs()
        ]

    def asgi(self) -> Starlette:
        from emulator import control, webflow
        from emulator.gitserve import git_app

        rest: list[BaseRoute] = [*self.rest_routes(), webflow.revoke_token_route(self)]
        routes: list[BaseRoute] = [Mount("/_emulator", routes=control.routes(self))]
        # GitHub Enterprise serves GraphQL at /api/graphql beside /api/v3 (githubkit
        # follows that); api.github.com at /graphql.
        graphql_path = (
            self.base_path.removesuffix("/v3") + "/graphql"
            if self.base_path.endswith("/api/v3")
            else self.base_path + "/graphql"
        )
        routes.append(Route(graphql_path, Endpoint(self, GRAPHQL), methods=["POST"]))
        routes += [Mount(self.base_path, routes=rest)] if self.base_path else rest
        # github.com's own pages (sign-in, App registration) live at the web origin.
        routes += webflow.routes(self)
        routes.append(Mount("", app=GitOrNotFound(git_app(self))))
        return Starlette(
            routes=routes, exception_handlers={404: json_not_found, 405: json_not_found}
        )

    def close(self) -> None:
        self.dispatcher.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
