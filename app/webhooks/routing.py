"""Routing parsed webhook events to handlers, and what a handler may do.

A handler runs inside the intake transaction: it records state and talks to
the runtime (start, signal, cancel) through :class:`HandlerContext`, and makes
no network calls. Anything that needs GitHub is an activity.

The machinery lives here, below ``handlers/``, so that the intake can take a
router without importing the handlers: they register on a :class:`Router`,
and only the composition root (``app/main/``) puts them together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from app.config import Settings
from app.engine import Registry, StartResult, Tx, TypedWorkflow
from app.webhooks.events import RoutingKey

Handler = Callable[[Any, "HandlerContext"], None]


@dataclass
class HandlerContext:
    tx: Tx
    registry: Registry
    settings: Settings
    delivery_id: str
    #: What the handlers did, recorded with the delivery (for humans and tests).
    notes: list[str] = field(default_factory=list)

    @property
    def bot_login(self) -> str:
        return f"{self.settings.github_app_slug}[bot]"

    def start(self, workflow: str, workflow_id: str, input: Any) -> StartResult:
        """Start ``workflow`` by name at the latest version this intake's
        registry has (one it lacks fails the delivery here, not later in a
        worker). A typed workflow takes its input model, validated and
        recorded as ``RuntimeClient.start`` records it; so a handler needs the
        workflow's contract (app/contracts), never the workflow itself."""
        version = self.registry.latest_version(workflow)
        defn = self.registry.workflow(workflow, version)
        if isinstance(defn, TypedWorkflow):
            input = defn.dump(input)
        elif isinstance(input, BaseModel):  # an untyped workflow validates it itself
            input = input.model_dump(mode="json")
        return self._start(workflow, version, workflow_id, input)

    def _start(self, workflow: str, version: int, workflow_id: str, input: Any) -> StartResult:
        result = self.tx.start_run(
            workflow_name=workflow,
            workflow_version=version,
            workflow_id=workflow_id,
            input=input,
        )
        verb = "started" if result.created else "already running"
        self.notes.append(f"{verb} {result.run_id}")
        return result

    def signal(self, workflow_id: str, name: str, payload: Any, dedupe_key: str) -> bool:
        delivered = self.tx.signal(workflow_id, name, payload, dedupe_key)
        outcome = "delivered" if delivered else "not delivered (duplicate or no open run)"
        self.notes.append(f"signal {name} to {workflow_id}: {outcome}")
        return delivered

    def cancel(self, workflow_id: str, reason: str) -> bool:
        requested = self.tx.request_cancel(workflow_id, reason)
        self.notes.append(
            f"cancel {workflow_id}: {'requested' if requested else 'nothing to cancel'}"
        )
        return requested


class Router:
    """Dispatch on (event, action); a handler registered with action ``None``
    sees every action of its event. Routers compose: ``Router(a, b)``."""

    def __init__(self, *routers: Router) -> None:
        self._routes: defaultdict[RoutingKey, list[Handler]] = defaultdict(list)
        for router in routers:
            for key, handlers in router._routes.items():
                self._routes[key].extend(handlers)

    def on(self, event: str, action: str | None = None) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self._routes[(event, action)].append(handler)
            return handler

        return register

    def handlers_for(self, key: RoutingKey) -> list[Handler]:
        event, action = key
        exact = self._routes.get(key, []) if action is not None else []
        return [*exact, *self._routes.get((event, None), [])]

    @property
    def keys(self) -> set[RoutingKey]:
        return set(self._routes)
