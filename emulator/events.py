"""Webhook events: who gets told what, in GitHub's payload shapes.

Every state change calls one method here. The payload gets the common keys
GitHub adds (``repository``, ``sender``, ``installation``, and ``organization``
for organization-owned repositories) and goes to every installed app that
covers the repository, holds the permission the event needs and subscribes to
it (check_run events only to the app that owns the run, as on GitHub).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from emulator.render import base, repos
from emulator.render.base import Json, Urls
from emulator.state import LEVEL_RANK, Installation, Repo, User

if TYPE_CHECKING:
    from emulator.app import Emulator

#: The permission an installation needs to receive each event.
EVENT_PERMISSION = {
    "issues": "issues",
    "issue_comment": "issues",
    "pull_request": "pull_requests",
    "pull_request_review": "pull_requests",
    "push": "contents",
    "check_run": "checks",
}


class Events:
    def __init__(self, emu: Emulator) -> None:
        self.emu = emu

    @property
    def urls(self) -> Urls:
        return self.emu.webhook_urls()

    def for_repo(
        self,
        repo: Repo,
        event: str,
        body: Json,
        *,
        sender: User,
        only_app: int | None = None,
    ) -> None:
        store = self.emu.store
        for inst in store.installations_for(repo):
            if only_app is not None and inst.app_id != only_app:
                continue
            if not self._wants(inst, event):
                continue
            payload = dict(body)
            payload["repository"] = repos.repository(
                self.urls, repo, open_issues=self.open_issues(repo), push_event=event == "push"
            )
            if repo.owner.type == "Organization":
                payload["organization"] = base.organization(self.urls, repo.owner)
            payload["sender"] = base.user(self.urls, sender)
            payload["installation"] = {
                "id": inst.id,
                "node_id": base.node_id("Installation", inst.id),
            }
            self._send(inst, event, payload, repo.id)

    def for_installation(self, inst: Installation, event: str, body: Json, *, sender: User) -> None:
        payload = dict(body)
        payload["sender"] = base.user(self.urls, sender)
        self._send(inst, event, payload, None)

    def open_issues(self, repo: Repo) -> int:
        return sum(1 for i in repo.issues.values() if i.state == "open")

    def _wants(self, inst: Installation, event: str) -> bool:
        need = EVENT_PERMISSION.get(event)
        if need and LEVEL_RANK.get(inst.permissions.get(need, "none"), 0) < 1:
            return False
        return event in inst.events

    def _send(
        self, inst: Installation, event: str, payload: dict[str, Any], repo_id: int | None
    ) -> None:
        app = self.emu.store.apps[inst.app_id]
        url = app.webhook_url or self.emu.default_webhook_url
        if not url:
            return
        secret = (
            app.webhook_secret
            if app.webhook_secret is not None
            else self.emu.default_webhook_secret
        )
        action = payload.get("action")
        dispatcher = self.emu.dispatcher
        delivery = dispatcher.new_delivery(
            event=event,
            action=action if isinstance(action, str) else None,
            installation_id=inst.id,
            repository_id=repo_id,
            url=url,
            secret=secret,
            hook_id=app.id * 10,
            app_id=app.id,
            body=json.dumps(payload).encode(),
        )
        dispatcher.enqueue(delivery)
