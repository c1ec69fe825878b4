from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from sqlalchemy import Engine

from app.engine._registry import Registry
from app.engine._runtime import Runtime
from app.engine._store import Store

RuntimeFactory = Callable[[Registry], Runtime]


@pytest.fixture
async def make_runtime(db_engine: Engine) -> AsyncIterator[Callable[..., Runtime]]:
    """Build in-process runtimes on the test database; all are stopped after."""
    started: list[Runtime] = []

    async def factory(registry: Registry, **kwargs: object) -> Runtime:
        kwargs.setdefault("reconcile_interval", 0.05)
        kwargs.setdefault("relay_grace", 0.2)
        runtime = Runtime(db_engine, registry, **kwargs)  # type: ignore[arg-type]
        await runtime.start_in_process()
        started.append(runtime)
        return runtime

    yield factory  # type: ignore[misc]
    for runtime in started:
        await runtime.stop()


@pytest.fixture
def store(db_engine: Engine) -> Store:
    return Store(db_engine)
