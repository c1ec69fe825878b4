"""Whether an installation may start more costly work now: the repair run
asks before its costly phases (app/operations/installation_caps.py decides)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.engine import RetryPolicy, Timeouts, activity_contract

DB = RetryPolicy(initial_interval=0.5, max_attempts=10)
DB_TIMEOUTS = Timeouts(start_to_close=60)


class SlotInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    installation_id: int


class SlotAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    granted: bool
    #: Runs of the installation doing costly work now.
    active: int = 0
    #: The day's model spend reached its cap: the run must not start work.
    spend_capped: bool = False
    spent_usd: float = 0.0
    cap_usd: float = 0.0
    #: A slot row was taken for the run (False: the active-run cap is off, so
    #: there is nothing to give back). Answers recorded before it may have.
    slot_taken: bool = True


class ReleaseResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    released: bool = True


take_installation_slot = activity_contract(
    "caps.take_slot", SlotInput, SlotAnswer, retry=DB, timeouts=DB_TIMEOUTS
)
release_installation_slot = activity_contract(
    "caps.release_slot", SlotInput, ReleaseResult, retry=DB, timeouts=DB_TIMEOUTS
)
