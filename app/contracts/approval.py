"""What an approval is bound to: one hash over every evidence item of the
proposal, computed from the evidence store's records (activities/approval.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.engine import RetryPolicy, Timeouts, activity_contract
from app.evidence import EvidenceRef

STORE = RetryPolicy(initial_interval=0.5, max_attempts=10)
STORE_TIMEOUTS = Timeouts(start_to_close=300, schedule_to_close=1800)


class BundleItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    ref: EvidenceRef


class BundleInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    items: list[BundleItem]


class BundleResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    #: sha256 over every item's label and re-computed content hash, in order.
    bundle_hash: str
    #: Items whose bytes are gone or no longer match their recorded sha256.
    unreadable: list[str] = []


evidence_bundle = activity_contract(
    "approval.evidence_bundle", BundleInput, BundleResult, retry=STORE, timeouts=STORE_TIMEOUTS
)
