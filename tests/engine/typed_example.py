"""The typed engine API in use: declarations shared by the typed-API tests
(and checked by mypy in ``test_typed_api.test_mypy_infers_the_typed_results``)."""

from __future__ import annotations

from typing import ClassVar, assert_type

from pydantic import BaseModel

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._registry import Registry
from app.engine._typed import SignalDefn, typed_activity, typed_activity_method, typed_workflow


class GreetInput(BaseModel):
    name: str
    #: Added after runs were recorded: left out of the recorded input at its default.
    excited: bool = False
    LATE_FIELDS: ClassVar[tuple[str, ...]] = ("excited",)


class GreetResult(BaseModel):
    text: str


class Approval(BaseModel):
    by: str
    approve: bool


APPROVAL = SignalDefn[Approval]("approval")


@typed_activity()
async def compose(actx: ActivityContext, input: GreetInput) -> GreetResult:
    return GreetResult(text=f"hello {input.name}" + ("!" if input.excited else ""))


class Shouter:
    """Activities as methods: their dependency (``suffix``) is the instance's."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    @typed_activity_method()
    async def shout(self, actx: ActivityContext, input: GreetResult) -> GreetResult:
        return GreetResult(text=input.text.upper() + self.suffix)


class GreetOutcome(BaseModel):
    texts: list[str]
    approved_by: str | None


@typed_workflow("greet-typed", signals=(APPROVAL,))
async def greet(ctx: WorkflowContext, input: GreetInput) -> GreetOutcome:
    first = await ctx.call(compose, input)
    assert_type(first, GreetResult)
    second = ctx.schedule(compose, GreetInput(name="again", excited=True))
    named = await ctx.call(compose, GreetInput(name="named"), step="by-hand")
    loud = await ctx.call(Shouter.shout, await second)
    approval = await ctx.wait_for(APPROVAL, timeout=60)
    assert_type(approval, Approval | None)
    return GreetOutcome(
        texts=[first.text, named.text, loud.text],
        approved_by=approval.by if approval else None,
    )


def registry(suffix: str = "!!") -> Registry:
    built = Registry.of([greet], [compose])
    built.register_activities(Shouter(suffix))
    return built
