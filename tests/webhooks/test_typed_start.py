"""``HandlerContext.start_typed``: a handler starts a typed workflow with its
input model, recorded as the client's typed start records it, at the
declared version, and only if the intake's registry has that workflow."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Settings
from app.engine import StartResult
from app.engine._errors import UnknownWorkflow
from app.engine._registry import Registry
from app.webhooks.routing import HandlerContext
from app.workflows.config_check import ConfigCheckRequest, config_check_run


class RecordingTx:
    """Stands in for the intake transaction: keeps what a start would record."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []

    def start_run(self, **fields: Any) -> StartResult:
        self.started.append(fields)
        return StartResult(run_id=f"{fields['workflow_id']}/1", created=True)


REQUEST = ConfigCheckRequest(
    installation_id=7, repo="octo/slugify", head_sha="a" * 40, base_sha="b" * 40
)


def handler_context(registry: Registry) -> tuple[HandlerContext, RecordingTx]:
    tx = RecordingTx()
    return HandlerContext(tx, registry, Settings(), "delivery-1"), tx  # type: ignore[arg-type]


def test_start_typed_records_the_model_as_json_at_the_declared_version() -> None:
    ctx, tx = handler_context(Registry.of([config_check_run]))
    result = ctx.start_typed(config_check_run, REQUEST, id="config-check:1:aaa")
    assert result.created
    assert tx.started == [
        {
            "workflow_name": "config-check",
            "workflow_version": config_check_run.version,
            "workflow_id": "config-check:1:aaa",
            "input": REQUEST.model_dump(mode="json"),
        }
    ]
    assert ctx.notes == ["started config-check:1:aaa/1"]


def test_start_typed_refuses_a_workflow_the_registry_lacks() -> None:
    ctx, tx = handler_context(Registry())
    with pytest.raises(UnknownWorkflow):
        ctx.start_typed(config_check_run, REQUEST, id="config-check:1:aaa")
    assert tx.started == []
