"""The store's statements stay compiled: found in SQLAlchemy's compiled cache
on every call after a process's first, and sent without a per-call rewrite.

A statement built in a shape that varies per call (a VALUES list of N rows,
values embedded in the SQL) is compiled again on every call; one with an
expanding ``IN`` over constants (``column.in_(("a", "b"))``) is found in the
cache but has its SQL string rewritten on every execution
(``_literal_execute_expanding_parameter``). The store's fixed lists are
rendered once, at compile time (``statements.one_of``); only a caller-sized
list (the activities a worker can run, ``p_can_run``) stays expanding.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Compiled

from app.engine._activity_context import ActivityContext
from app.engine._context import WorkflowContext
from app.engine._registry import Registry, activity, workflow
from app.engine._store import closing, combined, one_statement, statements

#: Bound lists that are expanding on purpose: their length is the caller's.
CALLER_SIZED = {"p_can_run"}

BOTH = ("postgresql", "sqlite")
#: The statements built once at import that hold a fixed ``IN`` list, by the
#: family whose fix renders it at compile time; the others (PostgreSQL's one
#: statement steps, closes and reads) are sent to PostgreSQL only.
ON_BOTH: dict[str, Any] = {
    "guard (GUARDED_COMMIT)": statements.GUARDED_COMMIT,
    "guard (GUARDED_CLOSE)": statements.GUARDED_CLOSE,
    "stop of a run's tasks (STOP_RUN_TASKS)": statements.STOP_RUN_TASKS,
    "bump of an open run's history (BUMP_HISTORY)": statements.BUMP_HISTORY,
}
FIXED_LISTS: dict[str, Any] = ON_BOTH | {
    "a workflow task's read (LOAD_TASK)": statements.LOAD_TASK,
    "steady step (FUSED_STEP_CLAIMED)": one_statement.FUSED_STEP_CLAIMED,
    "steady step (FUSED_STEP_QUEUED)": one_statement.FUSED_STEP_QUEUED,
    "first task (TASK_STEP_CLAIMED)": one_statement.TASK_STEP_CLAIMED,
    "first task (TASK_STEP_QUEUED)": one_statement.TASK_STEP_QUEUED,
    "close (CLOSE_STEP)": closing.CLOSE_STEP,
    "close (CLOSE_AFTER_RESULT)": closing.CLOSE_AFTER_RESULT,
    "stop of a run's work (STOP_RUN_WORK)": combined.STOP_RUN_WORK,
}

RECONCILER = str(Path("app", "engine", "_reconciler.py"))

DIALECTS = {"postgresql": postgresql.psycopg.dialect(), "sqlite": sqlite.dialect()}


def _rewritten_per_call(compiled: Compiled) -> list[str]:
    """The expanding parameters SQLAlchemy renders into ``compiled``'s SQL on
    every execution, but those of a caller-sized list."""
    return [
        str(bind.key)
        for bind in compiled.binds.values()  # type: ignore[attr-defined]
        if bind.expanding and bind.key not in CALLER_SIZED
    ]


@pytest.mark.parametrize(
    ("name", "dialect"),
    [(name, d) for name in FIXED_LISTS for d in (BOTH if name in ON_BOTH else BOTH[:1])],
)
def test_a_fixed_list_is_rendered_when_the_statement_is_compiled(name: str, dialect: str) -> None:
    compiled = FIXED_LISTS[name].compile(dialect=DIALECTS[dialect])
    assert _rewritten_per_call(compiled) == []
    assert "POSTCOMPILE" not in compiled.string


@activity("cache-add")
async def add(actx: ActivityContext, args: list[int]) -> int:
    return args[0] + args[1]


@workflow("cache-steps")
async def steps(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total = await ctx.activity(add, [total, i], step=f"add-{i}")
    # Two commands in one workflow task: the transaction's path (its guard).
    pair: list[int] = await ctx.gather(
        ctx.activity(add, [total, 1], step="x"), ctx.activity(add, [total, 2], step="y")
    )
    return sum(pair)


REGISTRY = Registry.of([steps], [add])


def _from_the_reconciler() -> bool:
    """Whether the reconciler sends the statement: its passes run on their
    own clock, so a kind of pass may first come up in any run."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(RECONCILER):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _Sent:
    """The compiled form of every statement the runs send while ``on`` (the
    reconciler's apart)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.on = False
        # Kept, not just their ids: an id is reused once its object is gone.
        self.compiled: list[Compiled] = []

    def __enter__(self) -> _Sent:
        event.listen(self.engine, "before_cursor_execute", self._sent)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._sent)

    def _sent(
        self, _conn: Any, _cursor: Any, _sql: str, _params: Any, context: Any, _many: Any
    ) -> None:
        if self.on and context is not None and context.compiled is not None:
            if _from_the_reconciler():
                return
            self.compiled.append(context.compiled)


async def test_a_repeated_run_compiles_nothing_and_rewrites_no_statement(
    make_runtime: Any, db_engine: Engine
) -> None:
    """Two runs warm the process up (every statement of the path compiled
    once); a third run of the same shape must find every statement in the
    compiled cache (the very ``Compiled`` objects of the first two) and send
    none with a per-call rewrite of a fixed list."""
    rt = await make_runtime(REGISTRY)
    with _Sent(db_engine) as sent:
        sent.on = True
        for k in range(2):
            await rt.start_workflow("cache-steps", f"warm-{k}", 4)
            assert (await rt.wait_for(f"warm-{k}")).result == 6 + 6 + 3
        warm = {id(c) for c in sent.compiled}
        seen_warm = len(sent.compiled)
        await rt.start_workflow("cache-steps", "steady", 4)
        assert (await rt.wait_for("steady")).result == 6 + 6 + 3
        sent.on = False
    steady = sent.compiled[seen_warm:]
    assert steady, "the steady run sent no statement"
    compiled_again = {c.string for c in steady if id(c) not in warm}
    assert compiled_again == set(), "compiled again in a steady run"
    rewritten = {c.string: _rewritten_per_call(c) for c in steady if _rewritten_per_call(c)}
    assert rewritten == {}, "rewritten on every execution"
