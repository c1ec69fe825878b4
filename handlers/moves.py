"""Runs follow their issue and repository: re-keying a run when its issue
moves, finding a repository's or an installation's runs, and ending them
when what they work on is gone.

Written in the intake transaction, like every handler's effect: a move is
one UPDATE of the run's keys (its history and run id stay as they are)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import and_, select, update
from sqlalchemy.exc import IntegrityError

from app.contracts.ids import REPAIR_WORKFLOW, repair_workflow_id
from app.engine import schema
from app.webhooks.models import Repository
from app.webhooks.routing import HandlerContext

#: What a run's record says when the thing it worked on vanished with all its
#: resources: nothing is left on GitHub that the run could clean.
NOTHING_TO_CLEAN = "nothing is left on GitHub to clean up"


def move_run(
    ctx: HandlerContext, workflow_id: str, *, repository: Repository, issue_number: int
) -> None:
    """Re-key the active run of ``workflow_id`` to the issue's new place."""
    run = ctx.tx.active_run(workflow_id)
    if run is None:
        ctx.notes.append(f"no active run under {workflow_id} to move")
        return
    target = repair_workflow_id(repository.id, issue_number)
    if target == workflow_id:
        return
    if ctx.tx.active_run(target) is not None:
        # One active run per issue: the one already there keeps it.
        ctx.notes.append(f"{target} has an active run already: {run.run_id} not moved")
        return
    ctx.tx.conn.execute(
        update(schema.runs)
        .where(schema.runs.c.run_id == run.run_id)
        .values(workflow_id=target, active_key=target, updated_at=ctx.tx.now)
    )
    try:
        with ctx.tx.conn.begin_nested():
            # Dedupe keys follow the run, so a redelivered review stays one signal.
            ctx.tx.conn.execute(
                update(schema.signals)
                .where(schema.signals.c.run_id == run.run_id)
                .values(workflow_id=target)
            )
    except IntegrityError:
        # An older run under the target key saw the same keys: they stay where they are.
        ctx.notes.append(f"signals of {run.run_id} keep their old key")
    ctx.notes.append(f"run {run.run_id} moved to {target}")


def repository_runs(ctx: HandlerContext, repository_id: int) -> list[str]:
    """The active keys of the repository's open or parked repair runs."""
    prefix = repair_workflow_id(repository_id, 0).removesuffix("0")
    rows = ctx.tx.conn.execute(
        select(schema.runs.c.active_key).where(
            and_(
                schema.runs.c.workflow_name == REPAIR_WORKFLOW,
                schema.runs.c.active_key.startswith(prefix),
            )
        )
    )
    return sorted(str(row.active_key) for row in rows)


def installation_runs(ctx: HandlerContext, installation_id: int) -> Iterator[str]:
    """The active keys of the installation's open or parked repair runs (the
    installation is in each run's recorded input)."""
    rows = ctx.tx.conn.execute(
        select(schema.runs.c.active_key, schema.runs.c.input).where(
            schema.runs.c.workflow_name == REPAIR_WORKFLOW, schema.runs.c.active_key.is_not(None)
        )
    )
    for row in rows:
        if isinstance(row.input, dict) and row.input.get("installation_id") == installation_id:
            yield str(row.active_key)


def installation_open_runs(ctx: HandlerContext, installation_id: int) -> list[str]:
    """The active keys of every open run of the installation, whatever its
    workflow (repair runs, and the command, triage, onboarding and check runs
    that act for it): the installation is in each run's recorded input, or in
    the run request it carries."""
    columns = schema.runs.c
    rows = ctx.tx.conn.execute(
        select(columns.active_key, columns.input).where(columns.active_key.is_not(None))
    )
    return sorted(
        str(row.active_key) for row in rows if _installation_of(row.input) == installation_id
    )


def _installation_of(data: object) -> object:
    if not isinstance(data, dict):
        return None
    nested = data.get("request")
    if "installation_id" not in data and isinstance(nested, dict):
        return nested.get("installation_id")
    return data.get("installation_id")


def end_runs(ctx: HandlerContext, keys: list[str], why: str) -> None:
    """End each run at once, without running its cleanup: what it would clean
    (branch, pull request, comments) is gone with ``why``."""
    for key in keys:
        record = ctx.tx.terminate(key, f"{why}: {NOTHING_TO_CLEAN}")
        ctx.notes.append(f"{key}: {'ended' if record is not None else 'no active run'} ({why})")
