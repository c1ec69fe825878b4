"""What an approval is bound to, computed from the records themselves.

The approval record keeps one hash over every evidence item of the proposal.
At the merge the items are read back from the evidence store and hashed again
(the store checks each artifact's bytes against its sha256), so the merge
check compares the approval with values read independently of the run's own
state: an item added, removed, altered or lost since the approval changes the
hash.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict

from app.engine import ActivityContext, ActivityDefn, RetryPolicy, Timeouts, typed_activity
from app.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceRef, EvidenceStore

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


def bundle_hash(entries: list[tuple[str, str]]) -> str:
    """One hash over (label, content sha256) pairs, in the proposal's order."""
    canonical = json.dumps([list(e) for e in entries], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@typed_activity("approval.evidence_bundle", retry=STORE, timeouts=STORE_TIMEOUTS)
async def evidence_bundle(actx: ActivityContext, request: BundleInput) -> BundleResult:
    """Read every item back from the evidence store and hash the bundle."""
    store = actx.dep(EvidenceStore)
    entries: list[tuple[str, str]] = []
    unreadable: list[str] = []
    for item in request.items:
        try:
            data = store.get(item.ref.sha256)
        except (EvidenceMissing, EvidenceCorrupt):
            unreadable.append(item.label)
            entries.append((item.label, "unreadable"))
            continue
        entries.append((item.label, hashlib.sha256(data).hexdigest()))
    return BundleResult(bundle_hash=bundle_hash(entries), unreadable=unreadable)


ACTIVITIES: list[ActivityDefn] = [evidence_bundle]
