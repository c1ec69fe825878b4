"""Who may steer a run: a person's permission on the repository, read from
GitHub's API at the moment it matters (never from a webhook's payload)."""

from __future__ import annotations

from app.contracts import github
from app.engine import WorkflowContext
from app.workflows.calls import call


async def permission(
    ctx: WorkflowContext, user: str, *, repo: str, installation_id: int, step: str
) -> github.PermissionResult:
    """``user``'s permission on ``repo`` now (``may_write``: write, maintain or admin)."""
    return await call(
        ctx,
        github.permission,
        github.PermissionInput(repo=repo, installation_id=installation_id, user=user),
        step=step,
    )


async def may_write(
    ctx: WorkflowContext, user: str, *, repo: str, installation_id: int, step: str
) -> bool:
    """Whether ``user`` has write access (write, maintain or admin) now."""
    granted = await permission(ctx, user, repo=repo, installation_id=installation_id, step=step)
    return granted.may_write
