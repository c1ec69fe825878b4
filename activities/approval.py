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

from app.contracts import approval
from app.contracts.approval import BundleInput, BundleResult
from app.engine import ActivityContext, implements
from app.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceStore


def bundle_hash(entries: list[tuple[str, str]]) -> str:
    """One hash over (label, content sha256) pairs, in the proposal's order."""
    canonical = json.dumps([list(e) for e in entries], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ApprovalActivities:
    def __init__(self, evidence: EvidenceStore) -> None:
        self.evidence = evidence

    @implements(approval.evidence_bundle)
    async def evidence_bundle(self, actx: ActivityContext, request: BundleInput) -> BundleResult:
        """Read every item back from the evidence store and hash the bundle."""
        entries: list[tuple[str, str]] = []
        unreadable: list[str] = []
        for item in request.items:
            try:
                data = self.evidence.get(item.ref.sha256)
            except (EvidenceMissing, EvidenceCorrupt):
                unreadable.append(item.label)
                entries.append((item.label, "unreadable"))
                continue
            entries.append((item.label, hashlib.sha256(data).hexdigest()))
        return BundleResult(bundle_hash=bundle_hash(entries), unreadable=unreadable)
