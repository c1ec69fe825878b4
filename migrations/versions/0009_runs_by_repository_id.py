"""repair runs keyed by repository id

A repair run's workflow id was ``repair:<owner>/<name>#<issue>``: after a
rename or transfer GitHub sends the new ``full_name`` with the same
``repository.id``, so the next event found no run (and a label started a
second one). Runs are now ``repair:<repository id>#<issue>``. This re-keys
every repair run whose recorded input carries the repository id (open and
closed alike, so the run numbers and branch names that count earlier runs go
on from where they were); runs without it keep their name key, which the
handlers still look up.

Two active runs that now share one key (a rename already started a second
run) cannot both hold the key: the older keeps its name key as active key
and stays reachable through that name.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_runs = sa.table(
    "workflow_runs",
    sa.column("run_id", sa.String),
    sa.column("workflow_id", sa.String),
    sa.column("active_key", sa.String),
    sa.column("workflow_name", sa.String),
    sa.column("input", sa.JSON),
    sa.column("created_at", sa.Float),
)
_signals = sa.table(
    "signals",
    sa.column("workflow_id", sa.String),
    sa.column("run_id", sa.String),
)


def _input(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _keys(row: Any) -> tuple[str, str] | None:
    """(name key, id key) of a repair run, or None when its input lacks what is needed."""
    data = _input(row.input)
    repo_id, number, repo = data.get("repo_id"), data.get("issue_number"), data.get("repo")
    if not isinstance(repo_id, int) or not isinstance(number, int) or not isinstance(repo, str):
        return None
    return f"repair:{repo.lower()}#{number}", f"repair:{repo_id}#{number}"


def _move(conn: Any, run_id: str, workflow_id: str, active_key: str | None) -> None:
    conn.execute(
        _runs.update()
        .where(_runs.c.run_id == run_id)
        .values(workflow_id=workflow_id, active_key=active_key)
    )
    conn.execute(
        _signals.update().where(_signals.c.run_id == run_id).values(workflow_id=workflow_id)
    )


def _repair_runs(conn: Any) -> list[Any]:
    return list(
        conn.execute(
            sa.select(_runs)
            .where(_runs.c.workflow_name == "repair")
            .order_by(_runs.c.created_at.desc())
        )
    )


def upgrade() -> None:
    conn = op.get_bind()
    taken: set[str] = set()
    for row in _repair_runs(conn):  # newest first: the newest active run takes the key
        keys = _keys(row)
        if keys is None or row.workflow_id != keys[0]:
            continue
        _name_key, id_key = keys
        active = row.active_key
        if active is not None:
            active = row.active_key if id_key in taken else id_key
            taken.add(id_key)
        _move(conn, row.run_id, id_key, active)


def downgrade() -> None:
    conn = op.get_bind()
    for row in _repair_runs(conn):
        keys = _keys(row)
        if keys is None or row.workflow_id != keys[1]:
            continue
        name_key = keys[0]
        active = name_key if row.active_key == keys[1] else row.active_key
        _move(conn, row.run_id, name_key, active)
