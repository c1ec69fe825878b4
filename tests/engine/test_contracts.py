"""Activity contracts apart from their implementations: workflows call the
contract; a method marked ``@implements(contract)`` on an instance holding its
dependencies is the body; registration refuses a body that does not fit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from app.engine import (
    ActivityContext,
    Found,
    ReconcileResult,
    Registry,
    RetryPolicy,
    Runtime,
    TypedActivity,
    WorkflowContext,
    activity_contract,
    implements,
    typed_workflow,
)
from app.engine.testing import FakeActivities


class Word(BaseModel):
    text: str


class Length(BaseModel):
    n: int


MEASURE = activity_contract("contract.measure", Word, Length, retry=RetryPolicy(max_attempts=2))
RECONCILED = activity_contract("contract.reconciled", Word, Length, reconciled=True)


class Measurer:
    def __init__(self, extra: int) -> None:
        self.extra = extra  # the dependency, given explicitly

    @implements(MEASURE)
    async def measure(self, actx: ActivityContext, input: Word) -> Length:
        return Length(n=len(input.text) + self.extra)


@typed_workflow("contract-caller")
async def caller(ctx: WorkflowContext, input: Word) -> Length:
    return await ctx.call(MEASURE, input)


async def test_a_workflow_calls_the_contract_and_the_instance_runs_it(make_runtime: Any) -> None:
    registry = Registry.of([caller])
    assert registry.register_activities(Measurer(extra=10)) == ["contract.measure"]
    bound = registry.activities["contract.measure"]
    assert bound.options == MEASURE.options  # the contract's policy, not the method's
    rt = await make_runtime(registry)
    await rt.start(caller, Word(text="abc"), id="contract-1")
    run = await rt.wait_for("contract-1")
    assert (run.status, run.result) == ("completed", {"n": 13}), run.error


def test_a_contract_alone_is_not_an_implementation() -> None:
    with pytest.raises(TypeError, match="use register_activities"):
        Registry.of([], [MEASURE])


def test_registration_refuses_an_implementation_whose_models_differ() -> None:
    class WrongResult:
        @implements(MEASURE)
        async def measure(self, actx: ActivityContext, input: Word) -> Word:  # type: ignore[arg-type]
            return input

    class WrongInput:
        @implements(MEASURE)
        async def measure(self, actx: ActivityContext, input: Length) -> Length:  # type: ignore[arg-type]
            return input

    for wrong, shown in ((WrongResult, r"\(Word\) -> Word"), (WrongInput, r"\(Length\) -> Length")):
        registry = Registry()
        with pytest.raises(TypeError, match=rf"implements activity contract.measure as {shown}"):
            registry.register_activities(wrong())
        assert registry.activities == {}


def test_an_implementation_gives_a_reconcile_exactly_when_its_contract_says() -> None:
    async def found(self: Any, actx: ActivityContext, input: Word) -> ReconcileResult:
        return Found(Length(n=0))

    with pytest.raises(TypeError, match="the contract is reconciled, so give a reconcile="):

        @implements(RECONCILED)
        async def unreconciled(self: Any, actx: ActivityContext, input: Word) -> Length:
            return Length(n=1)

    with pytest.raises(TypeError, match="the contract is not reconciled, so give no reconcile="):

        @implements(MEASURE, reconcile=found)
        async def reconciled(self: Any, actx: ActivityContext, input: Word) -> Length:
            return Length(n=1)

    @implements(RECONCILED, reconcile=found)
    async def fine(self: Any, actx: ActivityContext, input: Word) -> Length:
        return Length(n=1)

    assert isinstance(fine, TypedActivity) and fine.reconcile is RECONCILED.reconcile


async def test_a_worker_refuses_to_start_without_the_body_of_a_declared_contract(
    db_engine: Any,
) -> None:
    registry = Registry.of([caller])
    registry.declare([MEASURE, RECONCILED])
    registry.register_activities(Measurer(extra=0))
    runtime = Runtime(db_engine, registry)
    try:
        with pytest.raises(RuntimeError, match=r"no implementation registered for .*reconciled"):
            await runtime.start_in_process()
        assert runtime.dispatcher is None  # refused before anything was started
    finally:
        await runtime.stop()


def test_the_kit_fakes_declared_contracts_by_name() -> None:
    registry = Registry.of([caller])
    registry.declare([MEASURE])
    fake = FakeActivities().registry(registry)
    assert fake.activities["contract.measure"].options == MEASURE.options
    fake.check_implemented()  # a fake is a body


async def test_an_arq_worker_refuses_too_before_it_connects(db_engine: Any) -> None:
    from app.engine import serve_arq

    registry = Registry.of([caller])
    registry.declare([MEASURE])
    runtime = Runtime(db_engine, registry)
    try:
        # Port 1: nothing listens; the refusal comes before any connection attempt
        # (bounded, so a missing refusal fails here instead of retrying forever).
        with pytest.raises(RuntimeError, match=r"no implementation registered for .*measure"):
            await asyncio.wait_for(
                serve_arq(
                    runtime,
                    "redis://127.0.0.1:1/0",
                    concurrency=1,
                    reconcile_interval=1.0,
                    drain_grace=0.0,
                ),
                timeout=30,
            )
    finally:
        await runtime.stop()
