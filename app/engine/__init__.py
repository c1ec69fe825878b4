"""The durable workflow engine's front door: everything code outside the engine
may use. Every other module here is private (``_``-prefixed) and may change
without notice; ``tests/test_import_direction.py`` holds product code to this
module and ``app.engine.testing``.

What is here, by purpose:

- Declaring work from type hints (pydantic models in and out):
  ``typed_workflow``, ``typed_activity``, ``typed_activity_method`` (an
  activity that is a method of an object holding its dependencies),
  ``activity_contract`` (an activity's name, models and policy without its
  body: what workflows call) and ``implements`` (the method that is its body),
  ``SignalDefn``; ``await ctx.call(activity, Input(...))`` returns the result
  model. The untyped ``workflow``, ``activity``, ``Signal`` remain while
  product code moves over. ``Registry``; the contexts a
  workflow (``WorkflowContext``) and an activity (``ActivityContext``) get;
  ``RetryPolicy`` and ``Timeouts``; what ``ctx.start_run``, ``ctx.cancel_run``
  and ``ctx.describe_run`` answer (``StartedRun``, ``CancelledRun``,
  ``RunDescription``); ``Found`` / ``Absent`` / ``Unknown``, what
  an activity's ``reconcile=`` answers after a lost outcome.
- Running it: ``Runtime`` (a worker process), ``RuntimeClient`` (start, signal,
  cancel, read runs from anywhere), ``make_engine`` (the database), the arq
  parts (``ArqDispatcher``, ``serve_arq``, ``until_stopped``,
  ``connect_redis``; loaded on first use, so a process that never touches
  Redis never imports arq).
- The transaction hook for intake and handlers: ``Store`` and ``Tx``
  (``store.transaction()`` yields a ``Tx`` whose starts and signals commit
  with the caller's own rows), ``RunRow`` and the status sets.
- Errors a workflow or activity raises or catches.
- Reading the record: ``schema`` (the tables, read-only), ``export_history``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.engine._activity_context import ActivityContext
from app.engine._client import RuntimeClient
from app.engine._context import Signal, WorkflowContext
from app.engine._db import checkpoint_wal, make_engine
from app.engine._errors import (
    ActivityCancelled,
    ActivityError,
    ActivityFailure,
    AmbiguousError,
    CleanupIncomplete,
    NeedsHuman,
    PermanentError,
    StaleLease,
    TransientError,
    WorkflowCancelled,
)
from app.engine._heap import freeze_startup_heap
from app.engine._history import export_history
from app.engine._jobs import Job
from app.engine._policy import RetryPolicy, Timeouts
from app.engine._registry import (
    Absent,
    ActivityDefn,
    Found,
    ReconcileResult,
    Registry,
    Unknown,
    activity,
    workflow,
)
from app.engine._run_commands import CancelledRun, RunDescription, StartedRun
from app.engine._runtime import SETTLED, Runtime
from app.engine._scheduler import WorkflowFuture
from app.engine._store import RunRow, StartResult, Store, Tx
from app.engine._store.async_store import StoreThreads
from app.engine._store.rows import run_row
from app.engine._store.schema import PUBLIC as schema
from app.engine._tables import (
    CLOSED_STATUSES,
    OPEN_STATUSES,
    PARKED_STATUSES,
    ActivityTask,
    HistoryEvent,
    SignalRecord,
    WorkflowRun,
)
from app.engine._typed import (
    InputRejected,
    SignalDefn,
    TypedActivity,
    TypedFuture,
    TypedWorkflow,
    activity_contract,
    implements,
    typed_activity,
    typed_activity_method,
    typed_workflow,
)

if TYPE_CHECKING:
    from app.engine._arq_dispatch import ArqDispatcher
    from app.engine._redis_channel import connect as connect_redis
    from app.engine._serve import serve_arq, until_stopped

#: Loaded on first use (arq and redis are heavy imports): name -> (module, attribute).
_LAZY = {
    "ArqDispatcher": ("app.engine._arq_dispatch", "ArqDispatcher"),
    "connect_redis": ("app.engine._redis_channel", "connect"),
    "serve_arq": ("app.engine._serve", "serve_arq"),
    "until_stopped": ("app.engine._serve", "until_stopped"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'app.engine' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = [
    "CLOSED_STATUSES",
    "OPEN_STATUSES",
    "PARKED_STATUSES",
    "SETTLED",
    "Absent",
    "ActivityCancelled",
    "ActivityContext",
    "ActivityDefn",
    "ActivityError",
    "ActivityFailure",
    "ActivityTask",
    "AmbiguousError",
    "ArqDispatcher",
    "CancelledRun",
    "CleanupIncomplete",
    "Found",
    "HistoryEvent",
    "InputRejected",
    "Job",
    "NeedsHuman",
    "PermanentError",
    "ReconcileResult",
    "Registry",
    "RetryPolicy",
    "RunDescription",
    "RunRow",
    "Runtime",
    "RuntimeClient",
    "Signal",
    "SignalDefn",
    "SignalRecord",
    "StaleLease",
    "StartResult",
    "StartedRun",
    "Store",
    "StoreThreads",
    "Timeouts",
    "TransientError",
    "Tx",
    "TypedActivity",
    "TypedFuture",
    "TypedWorkflow",
    "Unknown",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowFuture",
    "WorkflowRun",
    "activity",
    "activity_contract",
    "checkpoint_wal",
    "connect_redis",
    "export_history",
    "freeze_startup_heap",
    "implements",
    "make_engine",
    "run_row",
    "schema",
    "serve_arq",
    "typed_activity",
    "typed_activity_method",
    "typed_workflow",
    "until_stopped",
    "workflow",
]
