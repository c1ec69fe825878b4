"""The workflows and activities this build of repairbot runs."""

from __future__ import annotations

from app.engine.registry import Registry
from app.workflows import example


def build_registry() -> Registry:
    return Registry.of(example.WORKFLOWS, example.ACTIVITIES)
