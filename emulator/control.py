"""The control API under ``/_emulator``: build the world, inject faults, steer webhooks.

Unauthenticated on purpose (it is a test harness; never expose it). JSON in,
JSON out; errors are ``{"message": ...}`` with a 4xx status.

    POST   /users                               {login, type?, name?, email?}
                                                -> {id, login, token}
    POST   /apps                                {id?, name?, slug?, owner?, public_key_pem?,
                                                 permissions?, events?, webhook_url?,
                                                 webhook_secret?}
                                                -> {id, slug, private_key_pem?}
    POST   /installations                       {app_id, account, repositories?, permissions?}
    POST   /installations/{id}/repositories     {add?: [...], remove?: [...]}
    DELETE /installations/{id}
    POST   /installations/{id}/suspend | /installations/{id}/unsuspend
    POST   /repos                               {owner, name, source?, default_branch?, private?}
    PUT    /repos/{owner}/{repo}/collaborators/{login}   {permission}
    POST   /repos/{owner}/{repo}/push           {as, branch?, files, message?, force?, parent?}
    POST   /repos/{owner}/{repo}/pulls/{n}/ready {as}
    DELETE /repos/{owner}/{repo}/issues/{n}     {as}  (GraphQL deleteIssue)
    POST   /repos/{owner}/{repo}/issues/{n}/transfer {as, repository}  (GraphQL transferIssue)
    POST   /clock                               {advance_seconds}
    GET|POST|DELETE /faults                     Fault fields (see emulator.faults)
    GET    /deliveries                          ?event=&action=
    GET    /deliveries/{id}
    POST   /deliveries/{id}/redeliver
    POST   /deliveries/wait                     {timeout?} -> {idle}
    POST   /deliveries/hold | /deliveries/release {reverse?} | /deliveries/duplicate {count?}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from emulator import scripting
from emulator.faults import Fault
from emulator.rest.http import ApiError

if TYPE_CHECKING:
    from emulator.app import Emulator

Op = Callable[[Request, dict[str, Any]], Any]

FAULT_FIELDS = (
    "endpoint",
    "kind",
    "times",
    "status",
    "delay",
    "rate_limit_style",
    "retry_after",
    "message",
)


def routes(emu: Emulator) -> list[BaseRoute]:
    def endpoint(op: Op, *, locked: bool = True, status: int = 200) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw.strip() else {}
            except ValueError:
                return JSONResponse({"message": "Problems parsing JSON"}, status_code=400)

            def run() -> Any:
                if not locked:
                    return op(request, body)
                with emu.store.lock:
                    return op(request, body)

            try:
                result = await anyio.to_thread.run_sync(run)
            except ApiError as exc:
                return JSONResponse({"message": exc.message}, status_code=exc.status)
            return JSONResponse(result, status_code=status)

        return handle

    p = "path_params"

    def pp(request: Request, name: str) -> str:
        return str(getattr(request, p)[name])

    def add_fault(_: Request, body: dict[str, Any]) -> Any:
        if body.get("kind") not in ("fail", "delay", "rate_limit", "drop") or not body.get(
            "endpoint"
        ):
            raise ApiError(
                422, "a fault needs an endpoint and a kind (fail, delay, rate_limit, drop)"
            )
        return emu.faults.add(Fault(**{k: body[k] for k in FAULT_FIELDS if k in body})).to_json()

    def list_deliveries(request: Request, _: dict[str, Any]) -> Any:
        event, action = request.query_params.get("event"), request.query_params.get("action")
        return [
            d.to_json()
            for d in emu.dispatcher.list()
            if (event is None or d.event == event) and (action is None or d.action == action)
        ]

    def get_delivery(request: Request, _: dict[str, Any]) -> Any:
        found = emu.dispatcher.get(int(pp(request, "id")))
        if found is None:
            raise ApiError(404, "No such delivery")
        return found.to_json()

    def redeliver(request: Request, _: dict[str, Any]) -> Any:
        attempt = emu.dispatcher.redeliver(int(pp(request, "id")))
        if attempt is None:
            raise ApiError(404, "No such delivery")
        return attempt.to_json()

    def advance_clock(_: Request, body: dict[str, Any]) -> Any:
        emu.store.clock.offset += timedelta(seconds=float(body.get("advance_seconds", 0)))
        return {"now": emu.store.now().isoformat()}

    def fork_pending(_: Request, body: dict[str, Any]) -> Any:
        # How many requests a new fork answers 404 before it exists.
        emu.store.fork_pending_requests = max(0, int(body.get("requests", 1)))
        return {"requests": emu.store.fork_pending_requests}

    def clear_faults(_: Request, __: dict[str, Any]) -> Any:
        emu.faults.clear()
        return {"cleared": True}

    def duplicate(_: Request, body: dict[str, Any]) -> Any:
        emu.dispatcher.duplicate_next(int(body.get("count", 1)))
        return {"duplicate": True}

    def hold(_: Request, __: dict[str, Any]) -> Any:
        emu.dispatcher.hold()
        return {"holding": True}

    ops: list[tuple[str, str, Op, dict[str, Any]]] = [
        ("POST", "/users", lambda r, b: scripting.create_user(emu, b), {"status": 201}),
        ("POST", "/apps", lambda r, b: scripting.create_app(emu, b), {"status": 201}),
        (
            "POST",
            "/installations",
            lambda r, b: scripting.create_installation(emu, b),
            {"status": 201},
        ),
        (
            "POST",
            "/installations/{id:int}/repositories",
            lambda r, b: scripting.change_installation_repositories(emu, int(pp(r, "id")), b),
            {},
        ),
        (
            "DELETE",
            "/installations/{id:int}",
            lambda r, b: scripting.delete_installation(emu, int(pp(r, "id"))),
            {},
        ),
        (
            "POST",
            "/installations/{id:int}/suspend",
            lambda r, b: scripting.suspend_installation(emu, int(pp(r, "id")), True),
            {},
        ),
        (
            "POST",
            "/installations/{id:int}/unsuspend",
            lambda r, b: scripting.suspend_installation(emu, int(pp(r, "id")), False),
            {},
        ),
        ("POST", "/repos", lambda r, b: scripting.create_repo(emu, b), {"status": 201}),
        (
            "DELETE",
            "/repos/{owner}/{repo}/issues/{number:int}",
            lambda r, b: scripting.delete_issue(
                emu, pp(r, "owner"), pp(r, "repo"), int(pp(r, "number")), b
            ),
            {},
        ),
        (
            "POST",
            "/repos/{owner}/{repo}/issues/{number:int}/transfer",
            lambda r, b: scripting.transfer_issue(
                emu, pp(r, "owner"), pp(r, "repo"), int(pp(r, "number")), b
            ),
            {},
        ),
        (
            "PUT",
            "/repos/{owner}/{repo}/collaborators/{login}",
            lambda r, b: scripting.set_permission(
                emu, pp(r, "owner"), pp(r, "repo"), pp(r, "login"), b
            ),
            {},
        ),
        (
            "POST",
            "/repos/{owner}/{repo}/push",
            lambda r, b: scripting.push_as(emu, pp(r, "owner"), pp(r, "repo"), b),
            {},
        ),
        (
            "POST",
            "/repos/{owner}/{repo}/pulls/{number:int}/ready",
            lambda r, b: scripting.mark_ready(
                emu, pp(r, "owner"), pp(r, "repo"), int(pp(r, "number")), b
            ),
            {},
        ),
        (
            "PATCH",
            "/repos/{owner}/{repo}",
            lambda r, b: scripting.repo_settings(emu, pp(r, "owner"), pp(r, "repo"), b),
            {},
        ),
        (
            "POST",
            "/repos/{owner}/{repo}/pulls/{number:int}/mergeable-unknown",
            lambda r, b: scripting.mergeable_unknown(
                emu, pp(r, "owner"), pp(r, "repo"), int(pp(r, "number")), b
            ),
            {},
        ),
        ("POST", "/forks/pending", fork_pending, {}),
        ("POST", "/clock", advance_clock, {}),
        ("GET", "/faults", lambda r, b: [f.to_json() for f in emu.faults.list()], {}),
        ("POST", "/faults", add_fault, {"status": 201}),
        ("DELETE", "/faults", clear_faults, {}),
        ("GET", "/deliveries", list_deliveries, {"locked": False}),
        (
            "POST",
            "/deliveries/wait",
            lambda r, b: {"idle": emu.dispatcher.wait_idle(float(b.get("timeout", 10)))},
            {"locked": False},
        ),
        ("POST", "/deliveries/hold", hold, {"locked": False}),
        (
            "POST",
            "/deliveries/release",
            lambda r, b: {
                "released": emu.dispatcher.release(reverse=bool(b.get("reverse", False)))
            },
            {"locked": False},
        ),
        (
            "POST",
            "/deliveries/duplicate",
            duplicate,
            {"locked": False},
        ),
        ("GET", "/deliveries/{id:int}", get_delivery, {"locked": False}),
        ("POST", "/deliveries/{id:int}/redeliver", redeliver, {"locked": False}),
    ]
    return [Route(path, endpoint(op, **opts), methods=[method]) for method, path, op, opts in ops]
