"""Activities and workflows declared from their type hints.

``@typed_activity()`` on ``async def compose(actx, input: GreetInput) -> GreetResult``
makes a :class:`TypedActivity` ``[GreetInput, GreetResult]``: the engine
validates the input, records it as JSON (``model_dump(mode="json")``, late
fields left out, see :func:`dump_input`), and hands workflow code the
validated result, so ``await ctx.call(compose, GreetInput(...))`` is a
``GreetResult`` for mypy and at run time. The recorded forms stay plain JSON:
the store, replay and recorded histories are unchanged.

    APPROVAL = SignalDefn[Approval]("approval")
    compose = activity_contract("compose", GreetInput, GreetResult, retry=API)  # no body

    class Greeter:                                  # dependencies: attributes
        def __init__(self, github: GitHub) -> None: self.github = github
        @implements(compose)                        # or @typed_activity_method(retry=API)
        async def compose(self, actx: ActivityContext, input: GreetInput) -> GreetResult: ...

    @typed_workflow("greet", version=1, cancel_phases=("archiving",), signals=(APPROVAL,))
    async def greet(ctx: WorkflowContext, input: GreetInput) -> GreetResult:
        text = await ctx.call(compose, input)                  # step id "compose-1"
        approval = await ctx.wait_for(APPROVAL)                # an Approval
        await ctx.start_workflow(follow_up, FollowUp(...), id=f"follow-{ctx.workflow_id}")
        return text

    registry = Registry.of([greet, follow_up]); registry.declare([compose])
    registry.register_activities(Greeter(github))  # refused if its models differ from compose's
    await client.start(greet, GreetInput(name="ada"), id="greet-1")
    await client.send("greet-1", APPROVAL, Approval(by="bob"), dedupe_key=review_id)

Side by side with the untyped API (``ctx.activity``, ``wait_signal``)
until product code has moved.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, get_type_hints

from pydantic import BaseModel, ValidationError

from app.engine._errors import PermanentError
from app.engine._policy import ActivityOptions, RetryPolicy, Timeouts
from app.engine._registry import (
    ActivityDefn,
    Found,
    ReconcileFn,
    ReconcileResult,
    WorkflowDefn,
)
from app.engine._scheduler import WorkflowFuture

if TYPE_CHECKING:
    from app.engine._activity_context import ActivityContext
    from app.engine._context import WorkflowContext

I = TypeVar("I", bound=BaseModel)  # noqa: E741 (the input model, as in Temporal)
R = TypeVar("R", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)


#: Activity names of typed activities: derived step ids (``<name>-<n>``) are
#: then valid, unescaped, in an operation id and a GitHub marker (no ":").
_ACTIVITY_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _checked_name(name: str) -> str:
    if not _ACTIVITY_NAME.fullmatch(name):
        raise ValueError(
            f"activity name {name!r}: use letters, digits, '.', '_' and '-' only "
            "(it becomes part of operation ids and GitHub markers)"
        )
    return name


class InputRejected(ValueError):
    """A payload that does not validate against the model its receiver declared."""


def dump_input(model: BaseModel) -> dict[str, Any]:
    """``model`` as the JSON the engine records (and hashes, to check replay).

    Fields a model lists in ``LATE_FIELDS`` were added after runs were
    recorded: left at their default they are omitted, so an input recorded
    before they existed still hashes the same and those runs replay.
    """
    data = model.model_dump(mode="json")
    fields = type(model).model_fields
    for name in getattr(type(model), "LATE_FIELDS", ()):
        if getattr(model, name) == fields[name].get_default(call_default_factory=True):
            data.pop(name, None)
    return data


def validated(model: type[M], value: Any, what: str) -> M:
    """``value`` as ``model``, or :class:`InputRejected` with a one-line reason."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        raise InputRejected(
            f"{what}: not a valid {model.__name__} ({where}: {first['msg']})"
        ) from None


def _hinted_models(fn: Callable[..., Any], skip: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """The input model (the parameter after ``skip`` leading ones) and result model."""
    hints = get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    if len(params) != skip + 1:
        raise TypeError(f"{fn.__qualname__} must take exactly one input after its context")
    input_type, result_type = hints.get(params[skip]), hints.get("return")
    for label, kind in (("input", input_type), ("result", result_type)):
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            raise TypeError(f"{fn.__qualname__}: its {label} must be hinted as a pydantic model")
    return input_type, result_type  # type: ignore[return-value]


@dataclass(frozen=True)
class TypedActivity(ActivityDefn, Generic[I, R]):
    """An activity whose input and result are pydantic models.

    ``fn`` is the JSON-in/JSON-out form the worker runs. An activity declared
    on a class (``typed_activity_method``) has ``bound=False`` until
    :meth:`Registry.register_activities` binds it to an instance."""

    input_type: type[BaseModel] = BaseModel
    result_type: type[BaseModel] = BaseModel
    bound: bool = True
    method: Callable[..., Awaitable[Any]] | None = None
    method_reconcile: Callable[..., Awaitable[ReconcileResult]] | None = field(default=None)
    #: The contract this method implements (``@implements``): registration
    #: checks the method's hinted models against it.
    contract: TypedActivity[Any, Any] | None = None

    def __get__(self, instance: object, owner: type | None = None) -> TypedActivity[I, R]:
        # ``Greeter.compose`` (and ``greeter.compose``) is the declaration
        # itself, which is what workflow code names in ``ctx.call``.
        return self

    def bind(self, instance: object) -> TypedActivity[I, R]:
        """This method activity run on ``instance`` (its dependencies)."""
        assert self.method is not None
        method = functools.partial(self.method, instance)
        reconcile = self.method_reconcile
        return TypedActivity(
            name=self.name,
            fn=_json_activity(method, self.input_type, self.name),
            options=self.options,
            reconcile=(
                _json_reconcile(functools.partial(reconcile, instance), self.input_type, self.name)
                if reconcile is not None
                else None
            ),
            input_type=self.input_type,
            result_type=self.result_type,
            bound=True,
        )


def _json_activity(
    fn: Callable[[ActivityContext, Any], Awaitable[BaseModel]],
    input_type: type[BaseModel],
    name: str,
) -> Callable[[ActivityContext, Any], Awaitable[Any]]:
    async def run(actx: ActivityContext, raw: Any) -> Any:
        try:
            input = validated(input_type, raw, f"activity {name} input")
        except InputRejected as exc:
            # A malformed input never heals: no retry (an untyped caller's
            # payload is checked here; a typed ``ctx.call`` checked it already).
            raise PermanentError(str(exc)) from None
        result = await fn(actx, input)
        return result.model_dump(mode="json")

    return run


def _json_reconcile(
    fn: Callable[[ActivityContext, Any], Awaitable[ReconcileResult]],
    input_type: type[BaseModel],
    name: str,
) -> ReconcileFn:
    async def reconcile(actx: ActivityContext, raw: Any) -> ReconcileResult:
        verdict = await fn(actx, validated(input_type, raw, f"activity {name} input"))
        if isinstance(verdict, Found) and isinstance(verdict.result, BaseModel):
            return Found(verdict.result.model_dump(mode="json"))
        return verdict

    return reconcile


def _options(retry: RetryPolicy | None, timeouts: Timeouts | None) -> ActivityOptions:
    return ActivityOptions(retry=retry or RetryPolicy(), timeouts=timeouts or Timeouts())


def typed_activity(
    name: str | None = None,
    *,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
    # ``Any``, not ``I``: a type variable here would be solved at this outer
    # call (to Never) instead of from the decorated function's hints.
    reconcile: Callable[[ActivityContext, Any], Awaitable[ReconcileResult]] | None = None,
) -> Callable[[Callable[[ActivityContext, I], Awaitable[R]]], TypedActivity[I, R]]:
    """Declare ``async def fn(actx, input: In) -> Out`` (``name`` defaults to
    the function's); ``reconcile`` takes the same validated input and may
    answer ``Found(Out(...))``."""

    def wrap(fn: Callable[[ActivityContext, I], Awaitable[R]]) -> TypedActivity[I, R]:
        input_type, result_type = _hinted_models(fn, skip=1)
        activity_name = _checked_name(name or fn.__name__)
        return TypedActivity(
            name=activity_name,
            fn=_json_activity(fn, input_type, activity_name),
            options=_options(retry, timeouts),
            reconcile=(
                _json_reconcile(reconcile, input_type, activity_name)
                if reconcile is not None
                else None
            ),
            input_type=input_type,
            result_type=result_type,
        )

    return wrap


def typed_activity_method(
    name: str | None = None,
    *,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
    reconcile: Callable[[Any, ActivityContext, Any], Awaitable[ReconcileResult]] | None = None,
) -> Callable[[Callable[[Any, ActivityContext, I], Awaitable[R]]], TypedActivity[I, R]]:
    """Declare ``async def method(self, actx, input: In) -> Out`` on a class
    whose instance holds the activity's dependencies; the worker runs it once
    :meth:`Registry.register_activities` was given that instance."""

    def wrap(fn: Callable[[Any, ActivityContext, I], Awaitable[R]]) -> TypedActivity[I, R]:
        input_type, result_type = _hinted_models(fn, skip=2)
        activity_name = _checked_name(name or fn.__name__)

        async def unbound(_actx: ActivityContext, _raw: Any) -> Any:
            raise RuntimeError(
                f"activity {activity_name} is a method: register its instance "
                "with Registry.register_activities"
            )

        return TypedActivity(
            name=activity_name,
            fn=unbound,
            options=_options(retry, timeouts),
            # Marks the activity as reconciled for the workflow side (the
            # recorded ``has_reconcile``); the bound copy carries the real one.
            reconcile=_json_reconcile(functools.partial(reconcile, None), input_type, activity_name)
            if reconcile is not None
            else None,
            input_type=input_type,
            result_type=result_type,
            bound=False,
            method=fn,
            method_reconcile=reconcile,
        )

    return wrap


def _unbound(activity_name: str) -> Callable[[ActivityContext, Any], Awaitable[Any]]:
    async def unbound(_actx: ActivityContext, _raw: Any) -> Any:
        raise RuntimeError(
            f"activity {activity_name} has no body here: register an instance implementing "
            "it with Registry.register_activities"
        )

    return unbound


async def _reconciled_elsewhere(_actx: ActivityContext, _raw: Any) -> ReconcileResult:
    raise RuntimeError("a contract's reconcile runs in its implementation")


def activity_contract(
    name: str,
    input: type[I],
    result: type[R],
    *,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
    reconciled: bool = False,
) -> TypedActivity[I, R]:
    """An activity declared without its body: what workflows call.

    ``ctx.call(contract, input)`` works as with any typed activity; the body
    is a method marked ``@implements(contract)`` on a class whose instance
    (holding its dependencies) is given to :meth:`Registry.register_activities`.
    ``reconciled``: the implementation answers ``reconcile=`` (workflows
    record whether an activity has one, so the contract must say)."""
    activity_name = _checked_name(name)
    for label, kind in (("input", input), ("result", result)):
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            raise TypeError(f"activity {activity_name}: its {label} must be a pydantic model")
    return TypedActivity(
        name=activity_name,
        fn=_unbound(activity_name),
        options=_options(retry, timeouts),
        reconcile=_reconciled_elsewhere if reconciled else None,
        input_type=input,
        result_type=result,
        bound=False,
    )


def implements(
    contract: TypedActivity[I, R],
    *,
    reconcile: Callable[[Any, ActivityContext, I], Awaitable[ReconcileResult]] | None = None,
) -> Callable[[Callable[[Any, ActivityContext, I], Awaitable[R]]], TypedActivity[I, R]]:
    """Mark ``async def method(self, actx, input: In) -> Out`` as the body of
    ``contract`` (same name, options; :meth:`Registry.register_activities`
    refuses it if its hinted models are not the contract's)."""

    def wrap(fn: Callable[[Any, ActivityContext, I], Awaitable[R]]) -> TypedActivity[I, R]:
        if (reconcile is None) != (contract.reconcile is None):
            raise TypeError(
                f"{fn.__qualname__} implements {contract.name}: the contract is "
                f"{'' if contract.reconcile else 'not '}reconciled, so give "
                f"{'a' if contract.reconcile else 'no'} reconcile="
            )
        input_type, result_type = _hinted_models(fn, skip=2)
        return TypedActivity(
            name=contract.name,
            fn=_unbound(contract.name),
            options=contract.options,
            reconcile=contract.reconcile,
            input_type=input_type,
            result_type=result_type,
            bound=False,
            method=fn,
            method_reconcile=reconcile,
            contract=contract,
        )

    return wrap


def check_implementation(defn: TypedActivity[Any, Any], owner: type) -> None:
    """Refuse an ``@implements`` method whose models are not its contract's."""
    contract = defn.contract
    if contract is None:
        return
    mine = (defn.input_type, defn.result_type)
    theirs = (contract.input_type, contract.result_type)
    if mine != theirs:
        raise TypeError(
            f"{owner.__name__} implements activity {contract.name} as "
            f"({mine[0].__name__}) -> {mine[1].__name__}, but its contract is "
            f"({theirs[0].__name__}) -> {theirs[1].__name__}"
        )


@dataclass(frozen=True)
class TypedWorkflow(WorkflowDefn, Generic[I, R]):
    """A workflow whose input and result are pydantic models."""

    input_type: type[BaseModel] = BaseModel
    result_type: type[BaseModel] = BaseModel
    #: Signals it receives: any client send of one of these names is validated.
    signals: tuple[SignalDefn[Any], ...] = ()

    def signal_named(self, name: str) -> SignalDefn[Any] | None:
        return next((s for s in self.signals if s.name == name), None)

    def dump(self, input: I) -> dict[str, Any]:
        """``input`` validated and as recorded (for ``start_workflow``)."""
        return dump_input(validated(self.input_type, input, f"workflow {self.name} input"))


def typed_workflow(
    name: str | None = None,
    *,
    version: int = 1,
    cancel_phases: tuple[str, ...] = (),
    resume_signal: str | None = None,
    signals: tuple[SignalDefn[Any], ...] = (),
) -> Callable[[Callable[[WorkflowContext, I], Coroutine[Any, Any, R]]], TypedWorkflow[I, R]]:
    """Declare ``async def fn(ctx, input: In) -> Out`` as a workflow.

    ``cancel_phases``: the workflow's own steps through cancellation (the
    engine reserves only ``cancel-requested`` and ``stopping-active-work``).
    ``resume_signal``: the signal an operator's resume sends a run this
    workflow parked (``ctx.wait_for_operator``). ``signals``: those it
    receives; a send with a malformed payload is refused before it is stored."""

    def wrap(fn: Callable[[WorkflowContext, I], Coroutine[Any, Any, R]]) -> TypedWorkflow[I, R]:
        input_type, result_type = _hinted_models(fn, skip=1)
        workflow_name = name or fn.__name__

        @functools.wraps(fn)  # ``__wrapped__``: the determinism check reads fn's source
        async def run(ctx: WorkflowContext, raw: Any) -> Any:
            input = validated(input_type, raw, f"workflow {workflow_name} input")
            result = await fn(ctx, input)  # type: ignore[arg-type]
            return result.model_dump(mode="json")

        extra: dict[str, Any] = {}
        if resume_signal is not None:
            extra["resume_signal"] = resume_signal
        return TypedWorkflow(
            name=workflow_name,
            version=version,
            fn=run,
            cancel_phases=cancel_phases,
            input_type=input_type,
            result_type=result_type,
            signals=signals,
            **extra,
        )

    return wrap


class TypedFuture(Generic[R]):
    """A scheduled typed activity: await it for the validated result.

    Wraps the engine's :class:`WorkflowFuture` (``.future``), which is what
    ``ctx.cancel_activity`` and ``first`` take."""

    __slots__ = ("future", "result_type")

    def __init__(self, future: WorkflowFuture, result_type: type[R]) -> None:
        self.future = future
        self.result_type = result_type

    def __await__(self) -> Generator[WorkflowFuture, None, R]:
        raw = yield from self.future.__await__()
        return self.result_type.model_validate(raw)


class SignalDefn(Generic[M]):
    """A signal and the model of its payload: ``APPROVE = SignalDefn[Approval]("approve")``
    (or ``SignalDefn("approve", Approval)``)."""

    def __init__(self, name: str, model: type[M] | None = None) -> None:
        self.name = name
        self._model = model

    @property
    def model(self) -> type[M]:
        if self._model is None:
            # ``SignalDefn[Approval](...)`` sets ``__orig_class__`` after __init__.
            args = getattr(getattr(self, "__orig_class__", None), "__args__", ())
            if not args or not (isinstance(args[0], type) and issubclass(args[0], BaseModel)):
                raise TypeError(f"signal {self.name!r} declares no pydantic model")
            self._model = cast("type[M]", args[0])
        return self._model

    def payload(self, value: M | dict[str, Any]) -> dict[str, Any]:
        """``value`` validated and as recorded; :class:`InputRejected` if malformed."""
        return validated(self.model, value, f"signal {self.name!r} payload").model_dump(mode="json")
