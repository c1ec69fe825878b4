"""``repository``: renames and transfers keep a repository's id, so its runs
(keyed by that id) are still found; they are told the new name, which their
later GitHub calls and clones use. A deleted repository takes its runs'
branches, pull requests and comments with it: the runs end at once."""

from __future__ import annotations

from sqlalchemy import update

from app.app_tables import InstallationRepository
from app.contracts.triage_inputs import REPOSITORY_MOVED, RepositoryMovedSignal
from app.webhooks.events import RepositoryEvent
from app.webhooks.routing import HandlerContext, Router
from handlers.inputs import clone_url
from handlers.moves import end_runs, repository_runs

router = Router()
_repositories = InstallationRepository.__table__  # type: ignore[attr-defined]


@router.on("repository", "renamed")
@router.on("repository", "transferred")
def moved(event: RepositoryEvent, ctx: HandlerContext) -> None:
    repo = event.repository
    ctx.tx.conn.execute(
        update(_repositories)
        .where(_repositories.c.repository_id == repo.id)
        .values(full_name=repo.full_name, updated_at=ctx.tx.now)
    )
    signal = RepositoryMovedSignal(
        full_name=repo.full_name, clone_url=clone_url(ctx.settings.github_git_url, repo.full_name)
    )
    for key in repository_runs(ctx, repo.id):
        ctx.signal(
            key,
            REPOSITORY_MOVED,
            signal.model_dump(mode="json"),
            dedupe_key=f"repository-{event.action}:{ctx.delivery_id}",
        )


@router.on("repository", "deleted")
def deleted(event: RepositoryEvent, ctx: HandlerContext) -> None:
    end_runs(
        ctx,
        repository_runs(ctx, event.repository.id),
        f"the repository {event.repository.full_name} was deleted",
    )
