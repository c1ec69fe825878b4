"""store_evidence: idempotent storage of artifacts workflow code holds."""

from __future__ import annotations

import base64

import pytest

from activities.evidence import store_evidence
from app.engine.errors import PermanentError
from app.evidence import EvidenceStore
from tests.activities.support import RecordingContext, call


async def test_text_and_binary_are_stored_once(
    actx: RecordingContext, evidence: EvidenceStore
) -> None:
    first = await call(store_evidence, actx, {"kind": "review", "name": "r.md", "text": "LGTM"})
    again = await call(store_evidence, actx, {"kind": "review", "name": "r.md", "text": "LGTM"})
    assert first == again and evidence.get(first["sha256"]) == b"LGTM"
    blob = base64.b64encode(b"\x89PNG\0").decode()
    shot = await call(
        store_evidence, actx, {"kind": "screenshot", "name": "s.png", "data_base64": blob}
    )
    assert evidence.get(shot["sha256"]) == b"\x89PNG\0" and shot["size"] == 5


async def test_bad_input_is_refused(actx: RecordingContext) -> None:
    with pytest.raises(PermanentError, match="exactly one of text or data_base64"):
        await call(store_evidence, actx, {"kind": "k", "name": "n"})
    with pytest.raises(PermanentError, match="not base64"):
        await call(store_evidence, actx, {"kind": "k", "name": "n", "data_base64": "%%%"})
