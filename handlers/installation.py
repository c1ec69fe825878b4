"""``installation`` and ``installation_repositories``: keep the app's record of
where it is installed current."""

from __future__ import annotations

from sqlalchemy import delete, insert, update

from app.app_tables import Installation, InstallationRepository
from app.webhooks.events import InstallationEvent, InstallationRepositoriesEvent
from app.webhooks.models import InstalledAccount, RepositoryRef
from app.webhooks.routing import HandlerContext, Router

router = Router()
installations = Installation.__table__  # type: ignore[attr-defined]
repositories = InstallationRepository.__table__  # type: ignore[attr-defined]

STATUS_BY_ACTION = {
    "created": "active",
    "unsuspend": "active",
    "new_permissions_accepted": "active",
    "suspend": "suspended",
    "deleted": "deleted",
}


def _upsert_installation(ctx: HandlerContext, inst: InstalledAccount, status: str) -> None:
    values = {
        "account_login": inst.account.login,
        "account_type": inst.account.type,
        "status": status,
        "updated_at": ctx.tx.now,
    }
    moved = ctx.tx.conn.execute(
        update(installations).where(installations.c.id == inst.id).values(**values)
    ).rowcount
    if not moved:
        ctx.tx.conn.execute(insert(installations).values(id=inst.id, **values))


def _set_repositories(
    ctx: HandlerContext, installation_id: int, repos: tuple[RepositoryRef, ...], active: bool
) -> None:
    for repo in repos:
        ctx.tx.conn.execute(
            delete(repositories).where(
                repositories.c.installation_id == installation_id,
                repositories.c.repository_id == repo.id,
            )
        )
        ctx.tx.conn.execute(
            insert(repositories).values(
                installation_id=installation_id,
                repository_id=repo.id,
                full_name=repo.full_name,
                active=active,
                updated_at=ctx.tx.now,
            )
        )
    if repos:
        verb = "added" if active else "removed"
        ctx.notes.append(f"{len(repos)} repositories {verb} for installation {installation_id}")


@router.on("installation")
def installation(event: InstallationEvent, ctx: HandlerContext) -> None:
    status = STATUS_BY_ACTION.get(event.action)
    if status is None:
        return
    _upsert_installation(ctx, event.installation, status)
    ctx.notes.append(f"installation {event.installation.id} is {status}")
    if event.action == "created":
        _set_repositories(ctx, event.installation.id, event.repositories, active=True)
    elif event.action == "deleted":
        ctx.tx.conn.execute(
            update(repositories)
            .where(repositories.c.installation_id == event.installation.id)
            .values(active=False, updated_at=ctx.tx.now)
        )


@router.on("installation_repositories")
def installation_repositories(event: InstallationRepositoriesEvent, ctx: HandlerContext) -> None:
    _upsert_installation(ctx, event.installation, "active")
    _set_repositories(ctx, event.installation.id, event.repositories_added, active=True)
    _set_repositories(ctx, event.installation.id, event.repositories_removed, active=False)
