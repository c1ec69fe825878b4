"""Who may steer a run: a person's permission on the repository, read from
GitHub's API at the moment it matters (never from a webhook's payload)."""

from __future__ import annotations

from app.contracts import github
from app.engine import WorkflowContext
from app.workflows.calls import call


async def may_write(
    ctx: WorkflowContext, user: str, *, repo: str, installation_id: int, step: str
) -> bool:
    """Whether ``user`` has write access (write, maintain or admin) now."""
    granted = await call(
        ctx,
        github.permission,
        github.PermissionInput(repo=repo, installation_id=installation_id, user=user),
        step=step,
    )
    return granted.may_write
