"""The check run on a pull request that changes ``.github/repairbot.yml``:
the file judged by the code a run uses, each problem with its line and field,
before the change lands (and before any run trips over it).

Keyed by repository id and head commit (:func:`config_check_workflow_id`), so
a redelivered ``pull_request`` event checks a commit once. A pull request
that leaves the file alone gets no check run.
"""

from __future__ import annotations

from pydantic import BaseModel

from app.contracts import config_check, github
from app.contracts.config_check import (
    CONFIG_CHECK_WORKFLOW,
    ConfigCheckRequest,
    ConfigCheckResult,
)
from app.engine import WorkflowContext, typed_workflow
from app.github.checks import Conclusion
from app.github.markdown import code_block
from app.operations.config_check import Problem, check_config
from app.repo_config import CONFIG_PATH, RepoConfig
from app.workflows.calls import call

CHECK_NAME = "repairbot config"


class CheckView(BaseModel):
    title: str
    summary: str
    conclusion: Conclusion


def view_of(change: config_check.ConfigChange) -> CheckView:
    """What the check run says (pure: repository text only ever inside code blocks)."""
    if change.deleted:
        return CheckView(
            title=f"{CONFIG_PATH} is removed",
            summary=(
                f"Without `{CONFIG_PATH}` repairbot does not run on this repository (unless "
                "its operator allows the defaults): a labelled issue is told to add it back."
            ),
            conclusion="neutral",
        )
    if change.problem is not None or change.text is None:
        return CheckView(
            title=f"{CONFIG_PATH} cannot be used",
            summary=code_block(change.problem or "the file could not be read"),
            conclusion="failure",
        )
    config, problems = check_config(change.text)
    if config is None:
        count = len(problems)
        return CheckView(
            title=f"{count} problem{'s' if count != 1 else ''} in {CONFIG_PATH}",
            summary=(
                "repairbot would refuse this file (`invalid-config`) on every run. "
                "Problems, by line and setting:\n\n" + code_block(_listed(problems))
            ),
            conclusion="failure",
        )
    return CheckView(
        title=f"{CONFIG_PATH} is valid",
        summary="repairbot reads it as:\n\n" + code_block(_described(config)),
        conclusion="success",
    )


def _listed(problems: list[Problem]) -> str:
    return "\n".join(problem.render(CONFIG_PATH) for problem in problems)


def _described(config: RepoConfig) -> str:
    lines = [
        f"trigger label: {config.trigger_label}",
        f"setup commands: {len(config.setup)} (network: {config.network})",
        f"reproduce: {'set' if config.reproduce else 'none (a repro block in each issue)'}",
        f"test: {'set' if config.test else 'none'}",
        f"merge method: {config.merge_method}; on base moved: {config.on_base_moved}",
        f"repair attempts: {config.budgets.repair_attempts}",
    ]
    return "\n".join(lines)


@typed_workflow(CONFIG_CHECK_WORKFLOW, version=1)
async def config_check_run(ctx: WorkflowContext, request: ConfigCheckRequest) -> ConfigCheckResult:
    where = {"repo": request.repo, "installation_id": request.installation_id}
    change = await call(
        ctx,
        config_check.config_change,
        config_check.ConfigChangeInput(
            **where, head_sha=request.head_sha, base_sha=request.base_sha
        ),
        step="read",
    )
    if not change.changed:
        return ConfigCheckResult(outcome="unchanged")
    view = view_of(change)
    await call(
        ctx,
        github.check_run,
        github.CheckRunInput(
            **where,
            op_run=ctx.run_id,
            op_step="config",
            head_sha=request.head_sha,
            name=CHECK_NAME,
            title=view.title,
            summary=view.summary,
            conclusion=view.conclusion,
        ),
        step="check-run",
    )
    return ConfigCheckResult(outcome=view.conclusion)


WORKFLOWS = [config_check_run]
