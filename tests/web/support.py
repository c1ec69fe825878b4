"""Helpers for the web tests: signed posting, the shared example payloads, and
stand-in workflows that let tests see what handlers started."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.engine._context import WorkflowContext
from app.engine._registry import workflow
from app.webhooks.signature import sign
from tests.shared_data import WEBHOOK_EXAMPLES

EXAMPLES = WEBHOOK_EXAMPLES
SECRET = "intake-test-secret"


@workflow("repair")
async def parked_repair(ctx: WorkflowContext, request: Any) -> Any:
    """Stands in for the repair workflow: waits, so tests can see what it received."""
    signal = await ctx.wait_signal("review")
    return signal.payload if signal else None


@workflow("slash-command")
async def parked_command(ctx: WorkflowContext, request: Any) -> Any:
    return request["command"]


@workflow("label-triage")
async def parked_label_triage(ctx: WorkflowContext, request: Any) -> Any:
    """Stands in for the label triage (which reads GitHub): keeps its input."""
    return request


@workflow("close-triage")
async def parked_close_triage(ctx: WorkflowContext, request: Any) -> Any:
    return request


@workflow("onboard")
async def parked_onboard(ctx: WorkflowContext, request: Any) -> Any:
    """Stands in for onboarding (which reads and writes GitHub): keeps its input."""
    return request


@workflow("config-check")
async def parked_config_check(ctx: WorkflowContext, request: Any) -> Any:
    """Stands in for the config check (which reads GitHub): keeps its input."""
    return request


#: The stand-ins for every workflow a handler starts.
STAND_INS = [
    parked_repair,
    parked_command,
    parked_label_triage,
    parked_close_triage,
    parked_onboard,
    parked_config_check,
]


def example(event: str, action: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / event / f"{action}.json").read_text())
    return data


class Poster:
    def __init__(self, client: httpx.AsyncClient, secret: str) -> None:
        self.client = client
        self.secret = secret
        self.count = 0

    async def post(
        self,
        event: str,
        payload: dict[str, Any] | bytes,
        *,
        delivery: str | None = None,
        secret: str | None = None,
    ) -> httpx.Response:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.count += 1
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or f"delivery-{self.count}",
            "X-Hub-Signature-256": sign(body, secret or self.secret),
            "Content-Type": "application/json",
        }
        return await self.client.post("/webhooks/github", content=body, headers=headers)
