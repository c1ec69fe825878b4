"""Shared helpers of the activity tests.

:class:`RecordingContext` stands in for the runtime's ``ActivityContext``
(the same attributes and methods) and records heartbeats, so an activity can
be called directly (``await defn.fn(actx, input)``); ``test_repair_flow.py``
runs the same activities through the real runtime.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from activities.agent import AgentActivities, AgentTools
from activities.repo_commands import RepoCommandActivities
from activities.workspace import Checkouts, GitCredentials, WorkspaceActivities
from app.agent import AgentPolicy
from app.agent.http import AgentHttp
from app.agent.proxy import ModelProxy
from app.config import Settings
from app.contracts.workspace import WorkspaceSpec
from app.engine._registry import ActivityDefn, Registry
from app.engine._typed import TypedActivity
from app.evidence import EvidenceRef, EvidenceStore
from app.github.objcache import ObjectCache
from app.repo_config import Command
from app.sandbox.runner import Sandbox
from app.secrets import KnownSecrets
from tests.agent.sample_repo import FIX_ARGV, REPRO_ARGV, TEST_ARGV

REPRO = Command.of(REPRO_ARGV)
TESTS = Command.of(TEST_ARGV)
FIX_AGENT = {"backend": "command", "command": {"argv": FIX_ARGV}}
PY = sys.executable
T = TypeVar("T")


def body(activities: object, name: str) -> ActivityDefn:
    """Activity ``name`` as run on ``activities`` (the object holding its
    dependencies), to call directly: ``await body(...).fn(actx, raw)``."""
    registry = Registry()
    registry.register_activities(activities)
    return registry.activities[name]


class Dependencies:
    """The clients a test puts together (settings, evidence store, sandbox...),
    looked up by type: :func:`bodies` builds the activity objects from them
    as the worker builds them from its own."""

    def __init__(self, *objects: object) -> None:
        self._by_type: dict[type, object] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: object) -> None:
        self._by_type[type(obj)] = obj

    def get(self, kind: type[T]) -> T:
        found = self._by_type.get(kind)
        if found is None:
            for obj in self._by_type.values():
                if isinstance(obj, kind):
                    return obj
            raise LookupError(f"no {kind.__name__} was given to this worker")
        assert isinstance(found, kind)
        return found


class SimulatedCrash(BaseException):
    """The process "died" at a fault point (in-process stand-in for SIGKILL;
    the real one is in tests/e2e/test_agent_crashes.py)."""


class RecordingContext:
    def __init__(
        self,
        deps: Dependencies,
        *,
        attempt: int = 1,
        cancel_when: Callable[[list[Any]], bool] | None = None,
        carried: dict[str, Any] | None = None,
    ) -> None:
        self.deps = deps
        self.attempt = attempt
        #: As the runtime hands it over: what earlier attempts carried.
        self.carried: dict[str, Any] = dict(carried or {})
        self.run_id = "calc-issue-7/1"
        self.workflow_id = "calc-issue-7"
        self.operation_id = "calc-issue-7/1:step"
        #: Answer "cancellation requested" once this holds for the heartbeats so far.
        self.cancel_when = cancel_when
        self.heartbeats: list[Any] = []
        #: As the runtime hands it over: the last checkpoint of an earlier attempt.
        self.last_checkpoint: Any = None
        self.checkpoints: list[Any] = []
        #: A fault point (``name@N``) where this "worker" dies: SimulatedCrash.
        self.crash_at: str | None = None
        self._hits: dict[str, int] = {}

    async def heartbeat(self, details: Any = None) -> bool:
        self.heartbeats.append(details)
        return self.cancel_when is not None and self.cancel_when(self.heartbeats)

    async def carry(self, key: str, value: Any) -> bool:
        self.carried[key] = value
        return await self.heartbeat({})

    async def checkpoint(self, value: Any) -> bool:
        self.checkpoints.append(value)
        return await self.heartbeat({"checkpoint": value})

    def fault(self, name: str) -> None:
        self._hits[name] = self._hits.get(name, 0) + 1
        if self.crash_at == f"{name}@{self._hits[name]}":
            raise SimulatedCrash(self.crash_at)

    def resumed(self) -> RecordingContext:
        """The next attempt, handed this one's last checkpoint."""
        nxt = RecordingContext(self.deps, attempt=self.attempt + 1)
        nxt.last_checkpoint = self.checkpoints[-1] if self.checkpoints else None
        return nxt


def _optional(deps: Dependencies, kind: type[T]) -> T | None:
    try:
        return deps.get(kind)
    except LookupError:
        return None


def checkouts_of(deps: Dependencies) -> Checkouts:
    """What a test's ``deps`` give the checkout activities (settings and
    evidence required; sandbox and git credentials when the test has them)."""
    return Checkouts(
        deps.get(Settings),
        deps.get(EvidenceStore),
        _optional(deps, Sandbox) or Sandbox(),
        _optional(deps, GitCredentials) or GitCredentials(),
        _optional(deps, ObjectCache),
    )


def bodies(deps: Dependencies) -> list[object]:
    """The objects implementing the workspace, command and agent contracts,
    built from the clients a test put in ``deps`` (as the worker builds them)."""
    checkouts = checkouts_of(deps)
    agent = AgentTools(
        checkouts,
        policy=_optional(deps, AgentPolicy) or AgentPolicy(),
        http=_optional(deps, AgentHttp),
        proxy=_optional(deps, ModelProxy),
        secrets=_optional(deps, KnownSecrets),
    )
    return [
        WorkspaceActivities(checkouts),
        RepoCommandActivities(checkouts),
        AgentActivities(agent),
    ]


async def call(defn: ActivityDefn, actx: RecordingContext, payload: dict[str, Any]) -> Any:
    """Run an activity as a worker would: JSON in, JSON out. A contract runs
    on its body from :func:`bodies`."""
    if isinstance(defn, TypedActivity) and not defn.bound:
        registry = Registry()
        for activities in bodies(actx.deps):
            registry.register_activities(activities)
        defn = registry.activities[defn.name]
    return await defn.fn(actx, payload)  # type: ignore[arg-type]


def with_patch(spec: WorkspaceSpec, patch: EvidenceRef | None) -> dict[str, Any]:
    return spec.model_copy(update={"patch": patch}).model_dump(mode="json")
