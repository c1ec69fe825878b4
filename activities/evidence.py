"""The evidence activity.

``store_evidence`` lets workflow code keep an artifact it has in hand (a
review's text, a summary) by reference. Storing is idempotent (the same
bytes are one file), so a retried attempt is harmless and needs no
reconcile function.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from activities._support import parse_input
from app.engine.activity_context import ActivityContext
from app.engine.errors import PermanentError
from app.engine.policy import RetryPolicy, Timeouts
from app.engine.registry import activity
from app.evidence import EvidenceStore


class StoreInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)
    text: str | None = None
    data_base64: str | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> StoreInput:
        if (self.text is None) == (self.data_base64 is None):
            raise ValueError("give exactly one of text or data_base64")
        return self

    def data(self) -> bytes:
        if self.text is not None:
            return self.text.encode()
        assert self.data_base64 is not None
        try:
            return base64.b64decode(self.data_base64, validate=True)
        except binascii.Error as exc:
            raise PermanentError(f"data_base64 is not base64: {exc}") from None


@activity(
    "evidence.store",
    retry=RetryPolicy(initial_interval=0.5, max_interval=30.0, max_attempts=10),
    timeouts=Timeouts(start_to_close=60),
)
async def store_evidence(actx: ActivityContext, raw: dict[str, Any]) -> dict[str, Any]:
    request = parse_input(StoreInput, raw)
    ref = actx.dep(EvidenceStore).put(request.data(), kind=request.kind, name=request.name)
    return ref.model_dump(mode="json")


ACTIVITIES = [store_evidence]
