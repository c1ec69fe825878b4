"""``EmulatorClient``: drive an emulator from tests and the demo, the same way.

World-building goes through the control API (``/_emulator``); actions of
scripted humans (issues, labels, comments, reviews) go through the REST API
with that user's token, exactly as a person's browser would, so they take the
same code path, permission checks and webhooks as everything else.

Works against a server (``EmulatorClient("http://127.0.0.1:8000")``) or
in-process (``EmulatorClient("http://emulator", transport=httpx.ASGITransport(app))``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


class EmulatorError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class UserHandle:
    login: str
    id: int
    token: str


@dataclass(frozen=True)
class AppHandle:
    id: int
    slug: str
    #: Set when the emulator generated the key pair.
    private_key_pem: str | None
    #: The App's user authorization credentials (sign-in with GitHub).
    client_id: str = ""
    client_secret: str = ""


class _Part:
    def __init__(self, client: EmulatorClient) -> None:
        self._c = client


class Faults(_Part):
    async def add(self, endpoint: str, kind: str, **fields: Any) -> dict[str, Any]:
        """``endpoint``: ``"PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge"`` or
        ``"git push"``; ``kind``: fail, delay, rate_limit, drop; fields as ``Fault``."""
        result: dict[str, Any] = await self._c.control(
            "POST", "/faults", {"endpoint": endpoint, "kind": kind, **fields}
        )
        return result

    async def list(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._c.control("GET", "/faults")
        return result

    async def clear(self) -> None:
        await self._c.control("DELETE", "/faults")


class Deliveries(_Part):
    async def list(
        self, *, event: str | None = None, action: str | None = None
    ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("event", event), ("action", action)) if v}
        result: list[dict[str, Any]] = await self._c.control("GET", "/deliveries", params=params)
        return result

    async def get(self, delivery_id: int) -> dict[str, Any]:
        result: dict[str, Any] = await self._c.control("GET", f"/deliveries/{delivery_id}")
        return result

    async def redeliver(self, delivery_id: int) -> dict[str, Any]:
        """A new attempt with the same ``X-GitHub-Delivery``; returns the attempt record."""
        result: dict[str, Any] = await self._c.control(
            "POST", f"/deliveries/{delivery_id}/redeliver"
        )
        return result

    async def wait(self, timeout: float = 10.0) -> None:
        """Until every queued delivery has been sent (held ones excepted)."""
        result = await self._c.control("POST", "/deliveries/wait", {"timeout": timeout})
        if not result["idle"]:
            raise TimeoutError("webhook deliveries still pending")

    async def hold(self) -> None:
        await self._c.control("POST", "/deliveries/hold")

    async def release(self, *, reverse: bool = False) -> int:
        result = await self._c.control("POST", "/deliveries/release", {"reverse": reverse})
        return int(result["released"])

    async def duplicate_next(self, count: int = 1) -> None:
        await self._c.control("POST", "/deliveries/duplicate", {"count": count})


class EmulatorClient:
    def __init__(
        self,
        base_url: str,
        *,
        base_path: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.base_path = "/" + base_path.strip("/") if base_path.strip("/") else ""
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout)
        self.tokens: dict[str, str] = {}
        #: Ids of the repositories this client created, by lowercased full name
        #: (repairbot keys its runs by repository id).
        self.repo_ids: dict[str, int] = {}
        self.faults = Faults(self)
        self.deliveries = Deliveries(self)

    @property
    def api_url(self) -> str:
        """What to give githubkit as ``base_url``."""
        return self.base_url + self.base_path

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> EmulatorClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- transport -------------------------------------------------------------

    async def control(
        self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None
    ) -> Any:
        resp = await self._http.request(method, "/_emulator" + path, json=body, params=params)
        return self._result(resp)

    async def rest(self, method: str, path: str, *, as_user: str, body: Any = None) -> Any:
        """A REST call as a scripted user (their token from :meth:`create_user`)."""
        headers = {
            "Authorization": f"token {self.tokens[as_user]}",
            "Accept": "application/vnd.github+json",
        }
        resp = await self._http.request(method, self.base_path + path, json=body, headers=headers)
        return self._result(resp)

    @staticmethod
    def _result(resp: httpx.Response) -> Any:
        body = resp.json() if resp.content else None
        if resp.status_code >= 400:
            raise EmulatorError(resp.status_code, body)
        return body

    # -- world -----------------------------------------------------------------

    async def create_user(
        self, login: str, *, type: str = "User", name: str | None = None, email: str | None = None
    ) -> UserHandle:
        out = await self.control(
            "POST", "/users", {"login": login, "type": type, "name": name, "email": email}
        )
        self.tokens[out["login"]] = out["token"]
        return UserHandle(out["login"], out["id"], out["token"])

    async def create_app(
        self,
        *,
        name: str = "repairbot",
        public_key_pem: str | None = None,
        permissions: dict[str, str] | None = None,
        events: list[str] | None = None,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        app_id: int | None = None,
    ) -> AppHandle:
        body = {
            "name": name,
            "public_key_pem": public_key_pem,
            "permissions": permissions,
            "events": events,
            "webhook_url": webhook_url,
            "webhook_secret": webhook_secret,
            "id": app_id,
        }
        out = await self.control("POST", "/apps", {k: v for k, v in body.items() if v is not None})
        return AppHandle(
            out["id"],
            out["slug"],
            out.get("private_key_pem"),
            out.get("client_id", ""),
            out.get("client_secret", ""),
        )

    async def create_installation(
        self,
        app_id: int,
        account: str,
        *,
        repositories: list[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> int:
        body: dict[str, Any] = {"app_id": app_id, "account": account}
        if repositories is not None:
            body["repositories"] = repositories
        if permissions is not None:
            body["permissions"] = permissions
        out = await self.control("POST", "/installations", body)
        return int(out["id"])

    async def change_installation_repositories(
        self,
        installation_id: int,
        *,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.control(
            "POST",
            f"/installations/{installation_id}/repositories",
            {"add": list(add), "remove": list(remove)},
        )
        return result

    async def suspend_installation(self, installation_id: int, *, suspended: bool = True) -> None:
        verb = "suspend" if suspended else "unsuspend"
        await self.control("POST", f"/installations/{installation_id}/{verb}")

    async def delete_issue(self, owner: str, repo: str, number: int, *, as_user: str) -> None:
        await self.control("DELETE", f"/repos/{owner}/{repo}/issues/{number}", {"as": as_user})

    async def transfer_issue(
        self, owner: str, repo: str, number: int, to: str, *, as_user: str
    ) -> dict[str, Any]:
        """Move the issue to ``to`` (``owner/name``); its new ``{repository, number}``."""
        result: dict[str, Any] = await self.control(
            "POST",
            f"/repos/{owner}/{repo}/issues/{number}/transfer",
            {"as": as_user, "repository": to},
        )
        return result

    async def rename_repo(self, owner: str, repo: str, name: str, *, as_user: str) -> None:
        """A rename through REST (admin); the client keeps the id under the new name."""
        await self.rest("PATCH", f"/repos/{owner}/{repo}", as_user=as_user, body={"name": name})
        moved = self.repo_ids.pop(f"{owner}/{repo}".lower(), None)
        if moved is not None:
            self.repo_ids[f"{owner}/{name}".lower()] = moved

    async def delete_installation(self, installation_id: int) -> None:
        await self.control("DELETE", f"/installations/{installation_id}")

    async def create_repo_from_folder(
        self,
        owner: str,
        name: str,
        source: Path | None,
        *,
        default_branch: str = "main",
        private: bool = False,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.control(
            "POST",
            "/repos",
            {
                "owner": owner,
                "name": name,
                "source": str(source) if source else None,
                "default_branch": default_branch,
                "private": private,
            },
        )
        self.repo_ids[f"{owner}/{name}".lower()] = int(result["id"])
        return result

    def repo_id(self, full_name: str) -> int:
        """The id of a repository this client created (it survives renames)."""
        return self.repo_ids[full_name.lower()]

    async def set_permission(self, owner: str, repo: str, login: str, permission: str) -> None:
        await self.control(
            "PUT", f"/repos/{owner}/{repo}/collaborators/{login}", {"permission": permission}
        )

    async def push_as(
        self,
        user: str,
        owner: str,
        repo: str,
        branch: str,
        files: dict[str, str | None],
        *,
        message: str | None = None,
        force: bool = False,
        parent: str | None = None,
    ) -> dict[str, Any]:
        """Commit ``files`` (None deletes) on ``branch`` as ``user`` and move the branch,
        announcing ``push`` and ``pull_request.synchronize`` like a real push."""
        body = {"as": user, "branch": branch, "files": files, "message": message, "force": force}
        if parent:
            body["parent"] = parent
        result: dict[str, Any] = await self.control("POST", f"/repos/{owner}/{repo}/push", body)
        return result

    async def mark_ready(self, owner: str, repo: str, number: int, *, as_user: str) -> None:
        await self.control("POST", f"/repos/{owner}/{repo}/pulls/{number}/ready", {"as": as_user})

    async def repo_settings(self, owner: str, repo: str, **settings: Any) -> dict[str, Any]:
        """Plan-level switches, e.g. ``drafts_supported=False``."""
        result: dict[str, Any] = await self.control("PATCH", f"/repos/{owner}/{repo}", settings)
        return result

    async def mergeable_unknown(self, owner: str, repo: str, number: int, *, reads: int) -> None:
        """The next ``reads`` reads of the pull request answer ``mergeable: null``."""
        await self.control(
            "POST", f"/repos/{owner}/{repo}/pulls/{number}/mergeable-unknown", {"reads": reads}
        )

    async def fork_pending(self, requests: int) -> None:
        """New forks answer 404 to this many requests before they exist."""
        await self.control("POST", "/forks/pending", {"requests": requests})

    async def advance_clock(self, seconds: float) -> None:
        await self.control("POST", "/clock", {"advance_seconds": seconds})

    # -- scripted humans (through REST, with their own tokens) ------------------

    async def create_issue(
        self,
        owner: str,
        repo: str,
        *,
        as_user: str,
        title: str,
        body: str | None = None,
        labels: list[str] | None = None,
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.rest(
            "POST",
            f"/repos/{owner}/{repo}/issues",
            as_user=as_user,
            body={"title": title, "body": body, "labels": labels or []},
        )
        return result

    async def add_label(
        self, owner: str, repo: str, number: int, label: str, *, as_user: str
    ) -> None:
        await self.rest(
            "POST",
            f"/repos/{owner}/{repo}/issues/{number}/labels",
            as_user=as_user,
            body={"labels": [label]},
        )

    async def remove_label(
        self, owner: str, repo: str, number: int, label: str, *, as_user: str
    ) -> None:
        await self.rest(
            "DELETE", f"/repos/{owner}/{repo}/issues/{number}/labels/{label}", as_user=as_user
        )

    async def comment(
        self, owner: str, repo: str, number: int, body: str, *, as_user: str
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.rest(
            "POST",
            f"/repos/{owner}/{repo}/issues/{number}/comments",
            as_user=as_user,
            body={"body": body},
        )
        return result

    async def edit_comment(
        self, owner: str, repo: str, comment_id: int, body: str, *, as_user: str
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.rest(
            "PATCH",
            f"/repos/{owner}/{repo}/issues/comments/{comment_id}",
            as_user=as_user,
            body={"body": body},
        )
        return result

    async def review(
        self,
        owner: str,
        repo: str,
        number: int,
        *,
        as_user: str,
        event: str,
        body: str = "",
        commit_id: str | None = None,
    ) -> dict[str, Any]:
        """``event``: APPROVE, REQUEST_CHANGES or COMMENT; ``commit_id`` defaults to the head."""
        payload: dict[str, Any] = {"event": event, "body": body}
        if commit_id:
            payload["commit_id"] = commit_id
        result: dict[str, Any] = await self.rest(
            "POST", f"/repos/{owner}/{repo}/pulls/{number}/reviews", as_user=as_user, body=payload
        )
        return result

    async def dismiss_review(
        self,
        owner: str,
        repo: str,
        number: int,
        review_id: int,
        *,
        as_user: str,
        message: str = "stale",
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.rest(
            "PUT",
            f"/repos/{owner}/{repo}/pulls/{number}/reviews/{review_id}/dismissals",
            as_user=as_user,
            body={"message": message},
        )
        return result
