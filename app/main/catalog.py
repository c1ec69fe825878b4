"""The workflows and activities this build of repairbot runs."""

from __future__ import annotations

from activities import (
    agent,
    approval,
    config_check,
    github,
    installation_caps,
    onboarding,
    repo_commands,
    runs,
    triage,
    trigger_config,
    workspace,
)
from activities.example import ExampleActivities
from app.engine import Registry
from app.workflows import config_check as config_check_workflow
from app.workflows import example, repair, slash_command
from app.workflows import onboarding as onboarding_workflow
from app.workflows import triage as triage_workflows


def build_registry() -> Registry:
    registry = Registry.of(
        [
            *example.WORKFLOWS,
            *slash_command.WORKFLOWS,
            *repair.WORKFLOWS,
            *onboarding_workflow.WORKFLOWS,
            *triage_workflows.WORKFLOWS,
            *config_check_workflow.WORKFLOWS,
        ],
        [
            *github.ACTIVITIES,
            *runs.ACTIVITIES,
            *installation_caps.ACTIVITIES,
            *trigger_config.ACTIVITIES,
            *triage.ACTIVITIES,
            *workspace.ACTIVITIES,
            *repo_commands.ACTIVITIES,
            *agent.ACTIVITIES,
            *onboarding.ACTIVITIES,
            *approval.ACTIVITIES,
            *config_check.ACTIVITIES,
        ],
    )
    registry.register_activities(ExampleActivities())
    return registry
