"""The workflows and activities this build of repairbot runs."""

from __future__ import annotations

from activities import github, runs
from app.engine.registry import Registry
from app.workflows import command, example


def build_registry() -> Registry:
    return Registry.of(
        [*example.WORKFLOWS, *command.WORKFLOWS],
        [*example.ACTIVITIES, *github.ACTIVITIES, *runs.ACTIVITIES],
    )
