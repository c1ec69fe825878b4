"""What a workflow learns when it acts on another run by workflow id
(``ctx.start_run``, ``ctx.cancel_run``, ``ctx.describe_run``).

The answers are recorded in the caller's history (``run_command_answered``)
in the transaction that carries out the command, so replay reads them
instead of asking again, and no crash separates the effect from its record.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class StartedRun(BaseModel):
    """The run under the workflow id: the one started, or the open one found."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    #: False: a run under that id was open already, so none was started.
    created: bool


class CancelledRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    #: False: no open or parked run under that id to cancel.
    cancelled: bool


class RunDescription(BaseModel):
    """The newest run under a workflow id, as it stood when the command ran."""

    model_config = ConfigDict(frozen=True)

    exists: bool
    run_id: str | None = None
    status: str | None = None
    #: The answer to the query asked for, while the run is open (None if it
    #: has no such query, or is closed).
    query: Any = None
    result: Any = None
    error: Any = None
