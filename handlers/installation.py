"""``installation`` and ``installation_repositories``: keep the app's record of
where it is installed current, and onboard each repository it gains (see
:mod:`app.workflows.onboarding`: a run per repository, keyed by its id)."""

from __future__ import annotations

from sqlalchemy import bindparam, delete, insert, update

from app.app_tables import Installation, InstallationRepository
from app.contracts.onboarding import ONBOARDING_WORKFLOW, OnboardRequest, onboarding_workflow_id
from app.contracts.triage_inputs import INSTALLATION_RESUMED
from app.webhooks.events import InstallationEvent, InstallationRepositoriesEvent
from app.webhooks.models import InstalledAccount, RepositoryRef
from app.webhooks.routing import HandlerContext, Router
from handlers.moves import end_runs, installation_open_runs, installation_runs

router = Router()
installations = Installation.__table__  # type: ignore[attr-defined]
repositories = InstallationRepository.__table__  # type: ignore[attr-defined]

# Built once, values as parameters: building them per delivery was most of
# these handlers' CPU (see app/intake/statements.py).
_UPDATE_INSTALLATION = (
    update(installations)
    .where(installations.c.id == bindparam("p_id"))
    .values(
        account_login=bindparam("p_login"),
        account_type=bindparam("p_type"),
        status=bindparam("p_status"),
        updated_at=bindparam("p_now"),
    )
)
_INSERT_INSTALLATION = insert(installations)
_DELETE_REPOSITORY = delete(repositories).where(
    repositories.c.installation_id == bindparam("p_installation"),
    repositories.c.repository_id == bindparam("p_repository"),
)
_INSERT_REPOSITORY = insert(repositories)
_DEACTIVATE_REPOSITORIES = (
    update(repositories)
    .where(repositories.c.installation_id == bindparam("p_installation"))
    .values(active=False, updated_at=bindparam("p_now"))
)

STATUS_BY_ACTION = {
    "created": "active",
    "unsuspend": "active",
    "new_permissions_accepted": "active",
    "suspend": "suspended",
    "deleted": "deleted",
}


def _upsert_installation(ctx: HandlerContext, inst: InstalledAccount, status: str) -> None:
    login, kind, now = inst.account.login, inst.account.type, ctx.tx.now
    moved = ctx.tx.conn.execute(
        _UPDATE_INSTALLATION,
        {"p_id": inst.id, "p_login": login, "p_type": kind, "p_status": status, "p_now": now},
    ).rowcount
    if not moved:
        ctx.tx.conn.execute(
            _INSERT_INSTALLATION,
            {
                "id": inst.id,
                "account_login": login,
                "account_type": kind,
                "status": status,
                "updated_at": now,
            },
        )


def _set_repositories(
    ctx: HandlerContext, installation_id: int, repos: tuple[RepositoryRef, ...], active: bool
) -> None:
    for repo in repos:
        ctx.tx.conn.execute(
            _DELETE_REPOSITORY, {"p_installation": installation_id, "p_repository": repo.id}
        )
        ctx.tx.conn.execute(
            _INSERT_REPOSITORY,
            {
                "installation_id": installation_id,
                "repository_id": repo.id,
                "full_name": repo.full_name,
                "active": active,
                "updated_at": ctx.tx.now,
            },
        )
    if repos:
        verb = "added" if active else "removed"
        ctx.notes.append(f"{len(repos)} repositories {verb} for installation {installation_id}")


def _onboard(ctx: HandlerContext, installation_id: int, repos: tuple[RepositoryRef, ...]) -> None:
    """Start the onboarding run of each repository (a no-op for one already started)."""
    if not ctx.settings.onboarding:
        return
    for repo in repos:
        request = OnboardRequest(
            installation_id=installation_id,
            repository_id=repo.id,
            repo=repo.full_name,
            trigger_label=ctx.settings.trigger_label,
        )
        ctx.start(ONBOARDING_WORKFLOW, onboarding_workflow_id(repo.id), request)


@router.on("installation")
def installation(event: InstallationEvent, ctx: HandlerContext) -> None:
    status = STATUS_BY_ACTION.get(event.action)
    if status is None:
        return
    _upsert_installation(ctx, event.installation, status)
    ctx.notes.append(f"installation {event.installation.id} is {status}")
    if event.action == "created":
        _set_repositories(ctx, event.installation.id, event.repositories, active=True)
        _onboard(ctx, event.installation.id, event.repositories)
    elif event.action == "suspend":
        # Nothing to change in the runs: their next GitHub call answers 403
        # "This installation has been suspended" and the run parks there
        # (app/workflows/calls.py) until the unsuspend below.
        waiting = len(installation_open_runs(ctx, event.installation.id))
        ctx.notes.append(f"{waiting} open runs wait for the unsuspend")
    elif event.action == "unsuspend":
        keys = installation_open_runs(ctx, event.installation.id)
        for key in keys:
            ctx.signal(key, INSTALLATION_RESUMED, {}, dedupe_key=f"unsuspend:{ctx.delivery_id}")
        ctx.notes.append(f"{len(keys)} open runs go on")
    elif event.action == "deleted":
        ctx.tx.conn.execute(
            _DEACTIVATE_REPOSITORIES, {"p_installation": event.installation.id, "p_now": ctx.tx.now}
        )
        # The app lost every token for these repositories: the runs cannot
        # clean anything there any more, so they end now.
        end_runs(
            ctx,
            list(installation_runs(ctx, event.installation.id)),
            f"the app was uninstalled by @{event.sender.login}",
        )


@router.on("installation_repositories")
def installation_repositories(event: InstallationRepositoriesEvent, ctx: HandlerContext) -> None:
    _upsert_installation(ctx, event.installation, "active")
    _set_repositories(ctx, event.installation.id, event.repositories_added, active=True)
    _onboard(ctx, event.installation.id, event.repositories_added)
    _set_repositories(ctx, event.installation.id, event.repositories_removed, active=False)
