"""The workflows this build of repairbot runs, and the activities they call:
contracts (their bodies are registered by the worker, app/main/worker_process.py,
with their dependencies)."""

from __future__ import annotations

from types import ModuleType

from app.contracts import (
    agent,
    approval,
    config_check,
    example,
    github,
    installation_caps,
    onboarding,
    repo_commands,
    runs,
    triage,
    trigger_config,
    workspace,
)
from app.engine import Registry, TypedActivity
from app.workflows import config_check as config_check_workflow
from app.workflows import example as example_workflow
from app.workflows import onboarding as onboarding_workflow
from app.workflows import repair, slash_command, slash_command_v2, triage_v1
from app.workflows import triage as triage_workflows

#: One module per activity group: its contracts are what workflows call.
CONTRACT_MODULES: tuple[ModuleType, ...] = (
    agent,
    approval,
    config_check,
    example,
    github,
    installation_caps,
    onboarding,
    repo_commands,
    runs,
    triage,
    trigger_config,
    workspace,
)


def contracts_in(module: ModuleType) -> list[TypedActivity[object, object]]:  # type: ignore[type-var]
    """The activity contracts a contracts module declares (bodies live elsewhere)."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, TypedActivity) and not value.bound and value.method is None
    ]


def build_registry() -> Registry:
    registry = Registry.of(
        [
            *example_workflow.WORKFLOWS,
            *slash_command_v2.WORKFLOWS,
            *slash_command.WORKFLOWS,
            *repair.WORKFLOWS,
            *onboarding_workflow.WORKFLOWS,
            *triage_v1.WORKFLOWS,
            *triage_workflows.WORKFLOWS,
            *config_check_workflow.WORKFLOWS,
        ]
    )
    for module in CONTRACT_MODULES:
        registry.declare(contracts_in(module))
    return registry
