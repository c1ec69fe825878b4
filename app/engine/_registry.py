"""Declaring workflows and activities, and the registry a worker runs with.

Declaring creates a plain object and has no side effect; a :class:`Registry`
is built explicitly at process start-up and checked for determinism there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.engine._determinism import check_workflow_source
from app.engine._errors import UnknownWorkflow
from app.engine._policy import ActivityOptions, RetryPolicy, Timeouts

if TYPE_CHECKING:
    from app.engine._activity_context import ActivityContext
    from app.engine._context import WorkflowContext

WorkflowFn = Callable[["WorkflowContext", Any], Coroutine[Any, Any, Any]]
ActivityFn = Callable[["ActivityContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Found:
    """Reconcile verdict: the effect happened; accept this as the activity's result."""

    result: Any


@dataclass(frozen=True)
class Absent:
    """Reconcile verdict: the effect provably did not happen; retry is safe."""


@dataclass(frozen=True)
class Unknown:
    """Reconcile verdict: cannot tell; the run is parked as needs-human."""

    reason: str


ReconcileResult = Found | Absent | Unknown
ReconcileFn = Callable[["ActivityContext", Any], Awaitable[ReconcileResult]]


#: The cancel phases every run goes through; the engine records them itself.
ENGINE_CANCEL_PHASES = ("cancel-requested", "stopping-active-work")
#: Deprecated: the phases a workflow declared with the untyped ``workflow()``
#: may enter (repair's). Typed workflows declare their own ``cancel_phases``.
LEGACY_CANCEL_PHASES = ("preserving-evidence", "cleaning-owned-resources")
#: The signal an operator's ``repairbot runs resume`` sends a run its code
#: parked, unless the workflow declares another (``resume_signal``).
OPERATOR_RESUME = "operator_resume"


@dataclass(frozen=True)
class WorkflowDefn:
    name: str
    version: int
    fn: WorkflowFn
    #: The workflow's own cancel phases (after the engine's); None: the legacy set.
    cancel_phases: tuple[str, ...] | None = None
    resume_signal: str = OPERATOR_RESUME

    def allowed_cancel_phases(self) -> tuple[str, ...]:
        own = LEGACY_CANCEL_PHASES if self.cancel_phases is None else self.cancel_phases
        return (*ENGINE_CANCEL_PHASES, *own)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class ActivityDefn:
    name: str
    fn: ActivityFn
    options: ActivityOptions
    reconcile: ReconcileFn | None = None


def workflow(name: str, *, version: int = 1) -> Callable[[WorkflowFn], WorkflowDefn]:
    """Declare ``async def fn(ctx, input)`` as workflow ``name`` at ``version``."""

    def wrap(fn: WorkflowFn) -> WorkflowDefn:
        return WorkflowDefn(name=name, version=version, fn=fn)

    return wrap


def activity(
    name: str,
    *,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
    reconcile: ReconcileFn | None = None,
) -> Callable[[ActivityFn], ActivityDefn]:
    """Declare ``async def fn(actx, input)`` as an activity with its policy."""

    def wrap(fn: ActivityFn) -> ActivityDefn:
        options = ActivityOptions(retry=retry or RetryPolicy(), timeouts=timeouts or Timeouts())
        return ActivityDefn(name=name, fn=fn, options=options, reconcile=reconcile)

    return wrap


@dataclass
class Registry:
    """The workflows (by name and version) and activities one worker can run."""

    workflows: dict[tuple[str, int], WorkflowDefn] = field(default_factory=dict)
    activities: dict[str, ActivityDefn] = field(default_factory=dict)
    #: Activity contracts (``activity_contract``) the workflows call, whose
    #: bodies are registered with :meth:`register_activities`: a worker refuses
    #: to start while one has none (:meth:`check_implemented`); the test kit
    #: fakes them by name.
    contracts: dict[str, ActivityDefn] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        workflows: Iterable[WorkflowDefn] = (),
        activities: Iterable[ActivityDefn] = (),
        *,
        check_determinism: bool = True,
    ) -> Registry:
        registry = cls()
        for wf in workflows:
            registry.add_workflow(wf, check_determinism=check_determinism)
        for act in activities:
            registry.add_activity(act)
        return registry

    def add_workflow(self, defn: WorkflowDefn, *, check_determinism: bool = True) -> None:
        if check_determinism:
            check_workflow_source(defn.fn)
        self.workflows[(defn.name, defn.version)] = defn

    def add_activity(self, defn: ActivityDefn) -> None:
        if not getattr(defn, "bound", True):
            raise TypeError(f"activity {defn.name} is a method: use register_activities(instance)")
        self.activities[defn.name] = defn

    def declare(self, contracts: Iterable[ActivityDefn]) -> None:
        """Contracts whose implementations this registry must get before a worker starts."""
        for contract in contracts:
            self.contracts[contract.name] = contract

    def check_implemented(self) -> None:
        """Refuse (one error naming them all) while a declared contract has no body."""
        missing = sorted(set(self.contracts) - set(self.activities))
        if missing:
            raise RuntimeError(
                f"no implementation registered for activities {', '.join(missing)}: "
                "give their objects to Registry.register_activities"
            )

    def register_activities(self, instance: object) -> list[str]:
        """Register every activity declared with ``typed_activity_method`` or
        ``implements`` on ``instance``'s class, run on ``instance`` (which holds their
        dependencies, given explicitly).
        Returns their names; an instance with none is an error."""
        from app.engine._typed import (  # typed builds on this module
            TypedActivity,
            check_implementation,
        )

        names = []
        for cls in reversed(type(instance).__mro__):
            for attr in vars(cls).values():
                if isinstance(attr, TypedActivity) and attr.method is not None:
                    check_implementation(attr, type(instance))
                    self.add_activity(attr.bind(instance))
                    names.append(attr.name)
        if not names:
            raise TypeError(f"{type(instance).__name__} declares no activity methods")
        return names

    def workflow(self, name: str, version: int) -> WorkflowDefn:
        try:
            return self.workflows[(name, version)]
        except KeyError:
            raise UnknownWorkflow(f"no workflow {name}@{version} in this worker") from None

    def has_workflow(self, name: str, version: int) -> bool:
        return (name, version) in self.workflows

    def latest_version(self, name: str) -> int:
        versions = [v for (n, v) in self.workflows if n == name]
        if not versions:
            raise UnknownWorkflow(f"no workflow named {name!r} in this worker")
        return max(versions)

    def workflow_keys(self) -> list[str]:
        return sorted(defn.key for defn in self.workflows.values())
