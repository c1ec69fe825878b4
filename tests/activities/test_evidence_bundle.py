"""The approval's evidence-bundle hash: one hash over every item, read back from
the evidence store, so anything added, removed, reordered, altered or lost
since the approval changes it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from activities.approval import ApprovalActivities
from app.contracts.approval import BundleInput, BundleItem, BundleResult
from app.evidence import EvidenceStore
from app.evidence.database import DatabaseEvidenceStore, blobs
from tests.activities.support import RecordingContext, body


async def _hash(actx: RecordingContext, items: list[BundleItem]) -> BundleResult:
    evidence_bundle = body(
        ApprovalActivities(actx.deps.get(EvidenceStore)), "approval.evidence_bundle"
    )
    raw: Any = await evidence_bundle.fn(actx, BundleInput(items=items).model_dump(mode="json"))
    return BundleResult.model_validate(raw)


def _items(evidence: EvidenceStore) -> list[BundleItem]:
    return [
        BundleItem(label="reproduction", ref=evidence.put(b"FAIL", kind="log", name="repro")),
        BundleItem(label="patch", ref=evidence.put(b"--- a\n+++ b\n", kind="patch", name="p")),
    ]


async def test_same_items_same_hash_and_every_change_changes_it(
    actx: RecordingContext, evidence: EvidenceStore
) -> None:
    items = _items(evidence)
    bound = await _hash(actx, items)
    assert bound == await _hash(actx, list(items)) and bound.unreadable == []
    extra = BundleItem(label="tests", ref=evidence.put(b"ok", kind="log", name="t"))
    assert (await _hash(actx, [*items, extra])).bundle_hash != bound.bundle_hash
    assert (await _hash(actx, items[:1])).bundle_hash != bound.bundle_hash
    assert (await _hash(actx, items[::-1])).bundle_hash != bound.bundle_hash
    relabelled = [items[0].model_copy(update={"label": "other"}), items[1]]
    assert (await _hash(actx, relabelled)).bundle_hash != bound.bundle_hash


async def test_an_altered_artifact_changes_the_hash(
    actx: RecordingContext, evidence: EvidenceStore
) -> None:
    items = _items(evidence)
    bound = await _hash(actx, items)
    assert isinstance(evidence, DatabaseEvidenceStore)
    with evidence.engine.begin() as conn:
        conn.execute(
            update(blobs)
            .where(blobs.c.sha256 == items[1].ref.sha256)
            .values(encoding="identity", data=b"--- a\n+++ b\n+import os\n")
        )
    again = await _hash(actx, items)
    assert again.unreadable == ["patch"] and again.bundle_hash != bound.bundle_hash
