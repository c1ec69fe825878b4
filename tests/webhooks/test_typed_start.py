"""``HandlerContext.start``: a handler starts a typed workflow by name with its
input model (from app/contracts, never the workflow module), recorded as the
client's typed start records it, at the latest version the intake's registry
has, and only if it has that workflow."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Settings
from app.contracts.config_check import CONFIG_CHECK_WORKFLOW, ConfigCheckRequest
from app.engine import InputRejected, StartResult
from app.engine._errors import UnknownWorkflow
from app.engine._registry import Registry
from app.webhooks.routing import HandlerContext
from app.workflows.config_check import config_check_run


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


def test_start_records_the_model_as_json_at_the_declared_version() -> None:
    ctx, tx = handler_context(Registry.of([config_check_run]))
    result = ctx.start(CONFIG_CHECK_WORKFLOW, "config-check:1:aaa", REQUEST)
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


def test_start_refuses_a_workflow_the_registry_lacks() -> None:
    ctx, tx = handler_context(Registry())
    with pytest.raises(UnknownWorkflow):
        ctx.start(CONFIG_CHECK_WORKFLOW, "config-check:1:aaa", REQUEST)
    assert tx.started == []


def test_start_refuses_an_input_the_typed_workflow_does_not_take() -> None:
    """Checked before anything is recorded: a handler that builds the wrong
    model fails its delivery instead of starting a run that cannot begin."""
    ctx, tx = handler_context(Registry.of([config_check_run]))
    with pytest.raises(InputRejected):
        ctx.start(CONFIG_CHECK_WORKFLOW, "config-check:1:aaa", {"repo": "octo/slugify"})
    assert tx.started == []
