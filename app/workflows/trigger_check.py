"""A bot's label, checked before the run clones anything (deterministic: the
config is the ``github.trigger_config`` activity's answer)."""

from __future__ import annotations

from app.contracts.trigger_config import TriggerConfigInput, read_trigger_config
from app.workflows.calls import call
from app.workflows.repair_base import RunBase


async def bot_may_trigger(run: RunBase) -> bool:
    """Whether the repository's config (on its default branch) names this label
    as its trigger and this bot on its allow-list."""
    request = run.request
    config = await call(
        run.ctx,
        read_trigger_config,
        TriggerConfigInput(**run.repo_fields(), ref=request.default_branch),
        step="bot-trigger-config",
    )
    return (
        config.valid
        and request.label == config.trigger_label
        and request.requested_by in config.allowed_bots
    )
