"""What the old slash-command and triage workflow versions ask of other runs:
start, cancel, retry and describe the issue's repair run (the current
versions use the engine's run commands instead; these stay for replay and
for runs still open)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.contracts.requests import RunRequest
from app.engine import RetryPolicy, Timeouts, activity_contract

DB = RetryPolicy(initial_interval=0.5, max_attempts=10)
DB_TIMEOUTS = Timeouts(start_to_close=60)
#: :class:`StartResult` ``reason`` of a retry refused because the run's fix was merged.
MERGED = "merged"


class CancelInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request: RunRequest
    reason: str


class RetryInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request: RunRequest
    author: str


class StartResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    created: bool
    #: Why no run was started: ``still running`` or ``merged``.
    reason: str | None = None


class CancelResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    cancelled: bool


class DescribeResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    exists: bool
    run_id: str | None = None
    status: str | None = None
    #: The run's ``status`` query (its state) while it is open.
    phase: dict[str, Any] | None = None
    result: Any = None
    error: Any = None


start_repair = activity_contract(
    "runs.start_repair", RunRequest, StartResult, retry=DB, timeouts=DB_TIMEOUTS
)
"""Start the issue's repair run unless one is active (then report that one)."""
cancel_repair = activity_contract(
    "runs.cancel_repair", CancelInput, CancelResult, retry=DB, timeouts=DB_TIMEOUTS
)
retry_repair = activity_contract(
    "runs.retry_repair", RetryInput, StartResult, retry=DB, timeouts=DB_TIMEOUTS
)
"""Start a fresh run after one that ended or was parked; never beside an
active one, nor after one whose fix was merged (the dashboard's rule too)."""
describe_repair = activity_contract(
    "runs.describe_repair", RunRequest, DescribeResult, retry=DB, timeouts=DB_TIMEOUTS
)
