"""``repairbot register``: create the GitHub App from a manifest.

GitHub's manifest flow: a page of ours posts the App's manifest to GitHub
(``/settings/apps/new``, or the organization's), the person confirms there,
GitHub sends the browser back to our ``redirect_url`` with a one-hour code,
and ``POST /app-manifests/{code}/conversions`` trades it for the App's id,
slug, private key, webhook secret and client credentials. We write those to
a file only its owner can read, which the settings read (app/config.py).

The manifest asks only for what the app uses: the permissions its activities
need, the events its handlers handle (installation events reach every App
unasked), and the Workflows permission only when the operator enables it
(fixes under ``.github/workflows/`` cannot be pushed without it).
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from githubkit import GitHub, UnauthAuthStrategy
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from app.config import APP_FILE_KEYS
from app.webhooks.events import RoutingKey

#: Events every App receives without subscribing (and may not list).
AUTOMATIC_EVENTS = frozenset({"installation", "installation_repositories"})
PERMISSIONS = {
    "metadata": "read",  # every App has it
    "contents": "write",  # clone, push the fix branch, merge
    "issues": "write",  # read the issue, the status comment, the trigger label
    "pull_requests": "write",  # open, update and merge the draft pull request
    "checks": "write",  # the check run on the proposed commit
}


def handled_events(routed: Iterable[RoutingKey]) -> list[str]:
    """The events to subscribe to: those the handlers are routed on (given by
    the composition root, which alone knows the handlers)."""
    return sorted({event for event, _ in routed} - AUTOMATIC_EVENTS)


def manifest(
    *,
    name: str,
    public_url: str,
    redirect_url: str,
    workflows: bool,
    routed: Iterable[RoutingKey],
    homepage: str = "",
    webhook_url: str = "",
) -> dict[str, Any]:
    """``webhook_url``: where GitHub delivers (default ``<public_url>/webhooks/github``;
    a webhook-proxy channel for a machine GitHub cannot reach)."""
    permissions = dict(PERMISSIONS)
    if workflows:
        permissions["workflows"] = "write"
    return {
        "name": name,
        "url": homepage or public_url,
        "description": "Reproduces labelled bugs, proposes verified fixes as draft pull "
        "requests, and merges them after a human approves the exact commit.",
        "hook_attributes": {"url": webhook_url or f"{public_url}/webhooks/github", "active": True},
        "redirect_url": redirect_url,
        "callback_urls": [f"{public_url}/auth/callback"],
        # Installable only on the account that owns it.
        "public": False,
        "default_permissions": permissions,
        "default_events": handled_events(routed),
        "request_oauth_on_install": False,
        "setup_on_update": False,
    }


def write_app_file(path: Path, credentials: dict[str, Any], *, force: bool = False) -> None:
    """Write atomically, created 0600 (never briefly readable by others)."""
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; pass --force to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".app-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(credentials, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: What GitHub's answer to the manifest conversion must hold.
_FROM_GITHUB = frozenset({"app_id", "slug", "pem", "webhook_secret", "client_id", "client_secret"})


@dataclass
class Registrar:
    """The small web app the operator opens in a browser."""

    name: str
    public_url: str
    own_url: str
    github_web_url: str
    github_api_url: str
    out: Path
    #: The (event, action) keys the handlers are routed on.
    routed: frozenset[RoutingKey]
    workflows: bool = False
    org: str = ""
    force: bool = False
    homepage: str = ""
    #: A webhook-proxy channel GitHub delivers to instead of ``public_url``.
    webhook_url: str = ""
    transport: httpx.AsyncBaseTransport | None = None
    state: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: Set once the App exists: what was written.
    registered: dict[str, Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def manifest(self) -> dict[str, Any]:
        return manifest(
            name=self.name,
            public_url=self.public_url,
            redirect_url=f"{self.own_url}/callback",
            workflows=self.workflows,
            routed=self.routed,
            homepage=self.homepage,
            webhook_url=self.webhook_url,
        )

    @property
    def hook_url(self) -> str:
        return self.webhook_url or f"{self.public_url}/webhooks/github"

    async def start(self, request: Request) -> Response:
        where = f"/organizations/{self.org}" if self.org else ""
        action = (
            f"{self.github_web_url}{where}/settings/apps/new?{urlencode({'state': self.state})}"
        )
        body = json.dumps(self.manifest())
        return _page(
            "Register repairbot on GitHub",
            f"<p>This creates the GitHub App <strong>{html.escape(self.name)}</strong> "
            f"{'for ' + html.escape(self.org) if self.org else 'on your account'}, "
            f"receiving webhooks at <code>{html.escape(self.hook_url)}</code>."
            "</p><details><summary>The manifest</summary>"
            f"<pre>{html.escape(json.dumps(self.manifest(), indent=2))}</pre></details>"
            f"<form method='post' action='{html.escape(action)}'>"
            f"<input type='hidden' name='manifest' value='{html.escape(body)}'>"
            "<button type='submit'>Create the GitHub App</button></form>",
        )

    async def callback(self, request: Request) -> Response:
        code = request.query_params.get("code", "")
        if not code or not secrets.compare_digest(
            request.query_params.get("state", "").encode(), self.state.encode()
        ):
            return _page("Refused", "<p>The answer does not belong to this registration.</p>", 400)
        if self.registered is not None:
            return _page("Already registered", "<p>This registration is finished.</p>", 409)
        async with GitHub(
            UnauthAuthStrategy(),
            base_url=self.github_api_url,
            auto_retry=False,
            async_transport=self.transport,
        ) as gh:
            created = (await gh.rest.apps.async_create_from_manifest(code)).parsed_data
        credentials = {
            "app_id": created.id,
            "slug": created.slug,
            "name": created.name,
            "owner": getattr(created.owner, "login", None),
            "html_url": created.html_url,
            "pem": created.pem,
            "webhook_secret": created.webhook_secret,
            "client_id": created.client_id,
            "client_secret": created.client_secret,
        }
        missing = [k for k in APP_FILE_KEYS if k in _FROM_GITHUB and not credentials.get(k)]
        if missing:
            return _page("Incomplete", f"<p>GitHub's answer lacks {missing}.</p>", 502)
        if self.webhook_url:
            # `repairbot dev` reads the channel from here, as the rest of the settings.
            credentials["webhook_proxy_url"] = self.webhook_url
        write_app_file(self.out, credentials, force=self.force)
        self.registered = credentials
        self.done.set()
        install = f"{created.html_url}/installations/new"
        return _page(
            "Registered",
            f"<p>The App <strong>{html.escape(str(created.slug))}</strong> (id {created.id}) "
            f"exists; its credentials are in <code>{html.escape(str(self.out))}</code> "
            "(mode 600).</p>"
            f"<p>Next: <a href='{html.escape(install)}'>install it</a> on the repositories "
            "repairbot should serve.</p>",
        )

    def asgi(self) -> Starlette:
        return Starlette(routes=[Route("/", self.start), Route("/callback", self.callback)])


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title></head><body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>",
        status_code=status,
    )
