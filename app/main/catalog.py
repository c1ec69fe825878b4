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
from activities import example as example_activities
from app.engine import Registry
from app.workflows import config_check as config_check_workflow
from app.workflows import example, repair, slash_command, slash_command_v3, triage_v2
from app.workflows import onboarding as onboarding_workflow
from app.workflows import triage as triage_workflows


def build_registry() -> Registry:
    return Registry.of(
        [
            *example.WORKFLOWS,
            *slash_command.WORKFLOWS,
            *slash_command_v3.WORKFLOWS,
            *repair.WORKFLOWS,
            *onboarding_workflow.WORKFLOWS,
            *triage_workflows.WORKFLOWS,
            *triage_v2.WORKFLOWS,
            *config_check_workflow.WORKFLOWS,
        ],
        [
            *example_activities.ACTIVITIES,
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
